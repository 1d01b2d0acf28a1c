"""The sans-I/O core: bytes and frames only. Nothing here imports asyncio or aiormq."""
