"""The Slurm layer: transports (local, ssh), the one SlurmClient, the parsers, capabilities, remote files and the REST client (rest/). It knows no runs."""
