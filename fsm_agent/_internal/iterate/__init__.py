"""The iterator API (WR-3): a request's deliveries handed out as typed events instead of callbacks."""
