"""``dpdc-privacy verify``: a bundle's privacy claim recomputed from its own files.

- :mod:`.verify` the verification of one run folder (read this first);
- :mod:`.receipt_shape` every field of privacy.json has the kind and range it must have;
- :mod:`.receipt` the files checked against each other (no accountant needed);
- :mod:`.bundle_checks` the bundle's bytes against privacy.json and manifest.json (and
manifest.sig);
- :mod:`.replan` plan.json against the plan config.yaml gives;
- :mod:`.verdict` the outcome and the table printed for it.
"""
