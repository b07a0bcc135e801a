"""A thin Kubernetes client on httpx and Trio. It knows nothing of Kokumi."""
