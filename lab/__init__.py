"""What the scripts share, beside the tutorial's files: files written atomically, checkpoints, the corpora and
their tokenizer, evaluation windows, the device, and the field's schemes (lab/field.py), registered when lab is
imported. The model itself is tiny_lm.py at the top level, and importing it loads none of them."""
from lab import field

field.load()
