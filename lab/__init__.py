"""What the scripts share, beside the tutorial's files: files written atomically, checkpoints, the corpora and
their tokenizer, evaluation windows, the device. The model itself is tiny_lm.py at the top level."""
