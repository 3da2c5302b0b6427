"""RocketMQ 4.x remoting: frames, command codecs, typed headers, the connection protocol, server and client."""
