"""What one audit is and how it runs: the membership design, identities, model jobs, the run
directory, the stages and ``audit()``."""
