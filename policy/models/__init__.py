"""The shipped pre-trained DL2 model."""
