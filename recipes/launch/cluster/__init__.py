"""More than one node: Ray nodes, a sandbox per node, addresses and interfaces, torchrun's rendezvous, containers."""
