"""The record: the run journal, the sample cache, spend, the committed baseline file and the one atomic
writer. Above :mod:`pytest_aimeasure.measure`, below everything that judges or compares."""
