"""What a run writes about its privacy, and the files that seal it.

- :mod:`.run_files` the one list of a run folder's files: writer, permission, released or not;
- :mod:`.report` privacy.json, the guarantee beside every synthetic set; :mod:`.inputs` every input
  with its privacy status; :mod:`.ledger` every output an accounted mechanism released;
- :mod:`.digests` the digests that tie released tensors, plan and private data together;
- :mod:`.manifest` manifest.json, the sha256 of every released file; :mod:`.signature` the owner's
  optional HMAC over it.
"""
