"""DP-MERF (Harder, Adamczewski & Park, AISTATS 2021) as a dpdc_lightning condensation method, in a
package of its own: ``pip install -e examples/dp_merf`` registers ``method=dp_merf`` through the
entry point group ``dpdc_lightning.methods`` (to the torch-free schema, :mod:`dp_merf.config`;
the method, :mod:`dp_merf.method`, is imported on first use)."""
