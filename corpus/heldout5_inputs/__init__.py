"""Input builders of the fifth held-out set (corpus/heldout5.json): numpy only, deterministic."""
