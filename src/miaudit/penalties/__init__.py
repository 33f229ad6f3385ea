"""Penalties added to the training loss (registered in PENALTIES); one module each."""
