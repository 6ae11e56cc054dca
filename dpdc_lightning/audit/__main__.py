"""python -m dpdc_lightning.audit RUN_DIR [audit.*=...] | metrics --scores S.npy --members M.npy ..."""

import sys

from dpdc_lightning.cli import run


def main(argv: list[str]) -> int:
    from dpdc_lightning.audit.command import audit_main

    return audit_main(argv)


if __name__ == "__main__":
    if sys.argv[1:2] == ["metrics"]:  # numbers in, numbers out: no need to import Lightning
        from dpdc_lightning.audit.command import run_metrics

        sys.exit(run_metrics(sys.argv[2:]))
    sys.exit(run(main))
