"""Pure differential-privacy maths: accounting, what (epsilon, delta) implies for attacks,
canary bounds and the NSDE bounds (see each module's docstring)."""

__all__ = ["accounting", "auditing", "bounds", "nsde", "nsde_gdp"]  # public modules
