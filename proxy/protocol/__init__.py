"""Message and service definitions of the 5.x wire (``*.proto``, ours) and the code grpcio-tools made from them.

The generated modules are committed (see docs/design.md); ``scripts/gen_proto.sh`` remakes them.
"""
