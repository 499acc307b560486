"""Features built on the seam around the loop: structured output (`output`) and human approval (`approval`).

Each is a package of small modules; the loop and the agent import them through the package, never a module
inside it.
"""
