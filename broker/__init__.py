"""The broker: configuration, the embedded name server, processors, managers and the controller that wires them."""
