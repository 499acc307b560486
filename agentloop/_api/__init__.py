"""The front end: `Agent`, which assembles the runtime and the features into what users call."""
