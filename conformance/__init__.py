"""AWQ-v2 conformance suite: golden vectors, their manifest and generator, and a runner.

The vectors, the manifest and ``python -m conformance.run`` are specified in the
project's issue tracker (conformance suite issue) and are not written yet; this
package exists so that the installed distribution already has its final shape.
"""
