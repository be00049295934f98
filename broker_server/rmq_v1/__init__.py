"""The rmq.v1 gRPC adapter: MessagingService, AdminService, RouteService and the Arrow Flight
data plane over the processors, and the gRPC server they share."""
