"""Input builders of the fourth held-out set (corpus/heldout4.json): numpy only, deterministic."""
