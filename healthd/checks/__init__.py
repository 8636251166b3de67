"""The check framework: the plugin interface, and the engine that runs checks under deadlines."""
