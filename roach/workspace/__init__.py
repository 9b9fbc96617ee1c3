"""The remote-workspace backend: a local folder mirrored to a cluster, plain sbatch scripts, bundles back."""
