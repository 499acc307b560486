"""The memory layer: chat memory (windows over a store, exclusive access) and caller-kept message history."""
