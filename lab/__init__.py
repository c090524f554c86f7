"""The lab: what builds the files the hybrid decoder loads, never imported at inference.

Prompt sets (prompts.py, prompt_bulk.py), self-distilled data (gen_data.py), the drafter's
training (train_drafter.py), the n-gram store's building (ngram.py), prompt lookup's
calibration (lookup_conf.py) and the design (a) pilot (inpass/). README.md says how to
regenerate the bundled drafter and n-gram store and what each step costs.
"""
