"""Handout figures: ``python -m scripts.figures`` redraws every one into handouts/figures/ (see __main__.py)."""
