"""Peers: other hosts' ctxd asked for their watches, and this host answering them."""
