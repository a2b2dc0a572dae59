"""The DL2 learned policy: features, actions, network, decision loop, training."""
