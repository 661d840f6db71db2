"""The I/O loops that run the request machine: sync (`sync.py`) and asyncio (`aio.py`), one core."""
