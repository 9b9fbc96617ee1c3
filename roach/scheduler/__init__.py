"""The Slurm layer: transports (local, ssh), the one SlurmClient, the one parse module, capabilities and remote files. It knows no runs."""
