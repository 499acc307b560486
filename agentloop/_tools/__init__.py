"""The tool layer: tools, the @tool decorator, schemas, argument validation, tool sets, running tool calls."""
