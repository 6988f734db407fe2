"""One plan: composition and verl's validation, its facts and checks, the exact command and the dry-run table."""
