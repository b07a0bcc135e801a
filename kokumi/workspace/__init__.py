"""What a person does in a workspace namespace, as themselves: the workflows both front ends call.

``kokumi cluster`` (a command line) and ``kokumi ui`` (a web page) are two ways in to the same
steps; the steps live here, below both, so that a Cluster registered by one is exactly what the
other would have registered, and each accepts the Secrets the other wrote. Nothing here parses a
command line, prints, or renders a page; every call runs with the client it is given, so the
caller's RBAC and Kokumi's admission policies apply.
"""
