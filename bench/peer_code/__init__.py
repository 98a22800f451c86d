"""Source files the peer servers load: copied into their model repositories, never imported by the harness."""
