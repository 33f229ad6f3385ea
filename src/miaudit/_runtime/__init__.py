"""Private plumbing: atomic io, threads, the GPU allocator, the machine description and import
paths. Not part of the public API."""
