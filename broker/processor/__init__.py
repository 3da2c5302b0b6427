"""One request processor per family of requests, as upstream's broker has them."""
