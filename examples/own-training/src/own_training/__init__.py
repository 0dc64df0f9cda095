"""A Ray Train function of its own: a small MLP learns a fixed random teacher network with DDP."""
