"""Training recipes and training-time defenses (registered in RECIPES); one module each."""
