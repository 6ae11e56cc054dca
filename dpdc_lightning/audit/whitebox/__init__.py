"""The white-box transcript audit: a private method's own mechanism run many times with canaries,
each canary's presence tested, ε bounded from below; and its self-test on planted bugs.

- :mod:`.audit` the audit (read this first);
- :mod:`.transcripts` the method's per-step releases, driven through its own release functions;
- :mod:`.noise_model` the model bound: the mechanism measured from its own releases;
- :mod:`.planted` wrong versions of a release, for the self-test ONLY;
- :mod:`.selftest` does the audit catch the planted bugs, and only them?
"""
