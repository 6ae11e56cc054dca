"""python -m dpdc_lightning.privacy VERB ...: the privacy calculator (its parser and verbs live in
cli/privacy_calculator.py, with every other command's)."""

from dpdc_lightning.cli.privacy_calculator import main
from dpdc_lightning.errors import main_entry

if __name__ == "__main__":
    main_entry(main)
