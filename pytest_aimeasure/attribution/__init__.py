"""The ruler against itself: split a drift into the judge's part and the system's part."""
