"""The web app: Flask blueprints, one per area; thin views over the core."""
