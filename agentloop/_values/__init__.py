"""The values layer: messages, content, events, results, errors, tool specifications, tool context, call
options and the stored format (codec). It imports nothing above it."""
