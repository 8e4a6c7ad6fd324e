"""The bookkeeping that keeps README.md and docs/ in step with results/: the tables written between markers
(lab/docsync/tables.py), the numbers inside sentences (lab/docsync/prose_numbers.py) and the findings' verdicts per setting (lab/docsync/findings.py).
A learner never needs to open these; the evaluation scripts call them after writing results/."""
