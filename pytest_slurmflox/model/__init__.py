"""What the package knows before and outside any cluster call: the settings and their parsers, the work dir, the
runtime revision, the redactor, the target file (its spec, schema, endpoints, site access, declared services,
directory, busy rules and runtime record, the one serializer), the group catalogue and declared keys, the pool and
ability interfaces (abstract), the evidence log and the run's shared records. It may import ``base`` and itself
only; every other folder may import it.
"""
