"""The ground floor: what one measurement is (pydantic models, artifacts, repeats, sampling plans) and the
pure statistics of its error bars. Imports nothing else of the package."""
