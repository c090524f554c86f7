"""The lab: what builds the files the voice agent loads; never imported by it, not installed.

Prompt sets (prompts.py, prompt_bulk.py), self-distilled data (gen_data.py), the drafter's
training (train_drafter.py), the n-gram store's building (ngram.py), prompt lookup's
calibration (lookup_conf.py), the design (a) pilot (inpass/) and the acoustic end-of-turn
classifier's training (train_turn_audio.py, the one module here that imports audio/). Each runs
from the repository root as ``python -m lab.<module>``. README.md says how to regenerate the
bundled drafter and n-gram store and what each step costs.
"""
