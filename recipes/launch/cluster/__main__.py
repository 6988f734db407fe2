"""``python -m recipes.launch.cluster`` is ``scripts/ray_cluster.sh`` (:mod:`recipes.launch.cluster.ray_cluster`)."""

import sys

from recipes.launch.cluster.ray_cluster import main

sys.exit(main())
