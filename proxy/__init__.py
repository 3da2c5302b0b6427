"""The RocketMQ 5.x gRPC protocol (``apache.rocketmq.v2.MessagingService``), served in the broker's process.

Beside ``remoting/`` (the 4.x wire), as RocketMQ 5 puts it in its proxy: it translates calls to the
broker's own processors, queues and store, and never reaches around them.
"""
