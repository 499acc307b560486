"""The runtime: the loop, the seam (middleware), TokenStream, sync calls, observing, pricing."""
