package dev.actonce.v1;

import static io.grpc.MethodDescriptor.generateFullMethodName;

/**
 * <pre>
 * RunActionsService is what an agent calls, through its sidecar, to act on the
 * artifact store. Every write lands once however often the run is retried:
 * its id is derived from the run, the attempt's checkpoint and what the write
 * is, and an audit event is durable before any answer is sent.
 * Errors carry google.rpc.ErrorInfo (domain "actonce") with a reason and
 * metadata.failure_class: REFUSED, RETRYABLE, PERMANENT or UNKNOWN.
 * </pre>
 */
@io.grpc.stub.annotations.GrpcGenerated
public final class RunActionsServiceGrpc {

  private RunActionsServiceGrpc() {}

  public static final java.lang.String SERVICE_NAME = "actonce.v1.RunActionsService";

  // Static method descriptors that strictly reflect the proto.
  private static volatile io.grpc.MethodDescriptor<dev.actonce.v1.BeginAttemptRequest,
      dev.actonce.v1.BeginAttemptResponse> getBeginAttemptMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "BeginAttempt",
      requestType = dev.actonce.v1.BeginAttemptRequest.class,
      responseType = dev.actonce.v1.BeginAttemptResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.actonce.v1.BeginAttemptRequest,
      dev.actonce.v1.BeginAttemptResponse> getBeginAttemptMethod() {
    io.grpc.MethodDescriptor<dev.actonce.v1.BeginAttemptRequest, dev.actonce.v1.BeginAttemptResponse> getBeginAttemptMethod;
    if ((getBeginAttemptMethod = RunActionsServiceGrpc.getBeginAttemptMethod) == null) {
      synchronized (RunActionsServiceGrpc.class) {
        if ((getBeginAttemptMethod = RunActionsServiceGrpc.getBeginAttemptMethod) == null) {
          RunActionsServiceGrpc.getBeginAttemptMethod = getBeginAttemptMethod =
              io.grpc.MethodDescriptor.<dev.actonce.v1.BeginAttemptRequest, dev.actonce.v1.BeginAttemptResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "BeginAttempt"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.actonce.v1.BeginAttemptRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.actonce.v1.BeginAttemptResponse.getDefaultInstance()))
              .setSchemaDescriptor(new RunActionsServiceMethodDescriptorSupplier("BeginAttempt"))
              .build();
        }
      }
    }
    return getBeginAttemptMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.actonce.v1.CreateRequest,
      dev.actonce.v1.CreateResponse> getCreateMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Create",
      requestType = dev.actonce.v1.CreateRequest.class,
      responseType = dev.actonce.v1.CreateResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.actonce.v1.CreateRequest,
      dev.actonce.v1.CreateResponse> getCreateMethod() {
    io.grpc.MethodDescriptor<dev.actonce.v1.CreateRequest, dev.actonce.v1.CreateResponse> getCreateMethod;
    if ((getCreateMethod = RunActionsServiceGrpc.getCreateMethod) == null) {
      synchronized (RunActionsServiceGrpc.class) {
        if ((getCreateMethod = RunActionsServiceGrpc.getCreateMethod) == null) {
          RunActionsServiceGrpc.getCreateMethod = getCreateMethod =
              io.grpc.MethodDescriptor.<dev.actonce.v1.CreateRequest, dev.actonce.v1.CreateResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Create"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.actonce.v1.CreateRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.actonce.v1.CreateResponse.getDefaultInstance()))
              .setSchemaDescriptor(new RunActionsServiceMethodDescriptorSupplier("Create"))
              .build();
        }
      }
    }
    return getCreateMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.actonce.v1.EditRequest,
      dev.actonce.v1.EditResponse> getEditMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Edit",
      requestType = dev.actonce.v1.EditRequest.class,
      responseType = dev.actonce.v1.EditResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.actonce.v1.EditRequest,
      dev.actonce.v1.EditResponse> getEditMethod() {
    io.grpc.MethodDescriptor<dev.actonce.v1.EditRequest, dev.actonce.v1.EditResponse> getEditMethod;
    if ((getEditMethod = RunActionsServiceGrpc.getEditMethod) == null) {
      synchronized (RunActionsServiceGrpc.class) {
        if ((getEditMethod = RunActionsServiceGrpc.getEditMethod) == null) {
          RunActionsServiceGrpc.getEditMethod = getEditMethod =
              io.grpc.MethodDescriptor.<dev.actonce.v1.EditRequest, dev.actonce.v1.EditResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Edit"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.actonce.v1.EditRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.actonce.v1.EditResponse.getDefaultInstance()))
              .setSchemaDescriptor(new RunActionsServiceMethodDescriptorSupplier("Edit"))
              .build();
        }
      }
    }
    return getEditMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.actonce.v1.NoticeRequest,
      dev.actonce.v1.NoticeResponse> getNoticeMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Notice",
      requestType = dev.actonce.v1.NoticeRequest.class,
      responseType = dev.actonce.v1.NoticeResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.actonce.v1.NoticeRequest,
      dev.actonce.v1.NoticeResponse> getNoticeMethod() {
    io.grpc.MethodDescriptor<dev.actonce.v1.NoticeRequest, dev.actonce.v1.NoticeResponse> getNoticeMethod;
    if ((getNoticeMethod = RunActionsServiceGrpc.getNoticeMethod) == null) {
      synchronized (RunActionsServiceGrpc.class) {
        if ((getNoticeMethod = RunActionsServiceGrpc.getNoticeMethod) == null) {
          RunActionsServiceGrpc.getNoticeMethod = getNoticeMethod =
              io.grpc.MethodDescriptor.<dev.actonce.v1.NoticeRequest, dev.actonce.v1.NoticeResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Notice"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.actonce.v1.NoticeRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.actonce.v1.NoticeResponse.getDefaultInstance()))
              .setSchemaDescriptor(new RunActionsServiceMethodDescriptorSupplier("Notice"))
              .build();
        }
      }
    }
    return getNoticeMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.actonce.v1.CreateThreadRequest,
      dev.actonce.v1.CreateThreadResponse> getCreateThreadMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "CreateThread",
      requestType = dev.actonce.v1.CreateThreadRequest.class,
      responseType = dev.actonce.v1.CreateThreadResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.actonce.v1.CreateThreadRequest,
      dev.actonce.v1.CreateThreadResponse> getCreateThreadMethod() {
    io.grpc.MethodDescriptor<dev.actonce.v1.CreateThreadRequest, dev.actonce.v1.CreateThreadResponse> getCreateThreadMethod;
    if ((getCreateThreadMethod = RunActionsServiceGrpc.getCreateThreadMethod) == null) {
      synchronized (RunActionsServiceGrpc.class) {
        if ((getCreateThreadMethod = RunActionsServiceGrpc.getCreateThreadMethod) == null) {
          RunActionsServiceGrpc.getCreateThreadMethod = getCreateThreadMethod =
              io.grpc.MethodDescriptor.<dev.actonce.v1.CreateThreadRequest, dev.actonce.v1.CreateThreadResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "CreateThread"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.actonce.v1.CreateThreadRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.actonce.v1.CreateThreadResponse.getDefaultInstance()))
              .setSchemaDescriptor(new RunActionsServiceMethodDescriptorSupplier("CreateThread"))
              .build();
        }
      }
    }
    return getCreateThreadMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.actonce.v1.SendRequest,
      dev.actonce.v1.SendResponse> getSendMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Send",
      requestType = dev.actonce.v1.SendRequest.class,
      responseType = dev.actonce.v1.SendResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.actonce.v1.SendRequest,
      dev.actonce.v1.SendResponse> getSendMethod() {
    io.grpc.MethodDescriptor<dev.actonce.v1.SendRequest, dev.actonce.v1.SendResponse> getSendMethod;
    if ((getSendMethod = RunActionsServiceGrpc.getSendMethod) == null) {
      synchronized (RunActionsServiceGrpc.class) {
        if ((getSendMethod = RunActionsServiceGrpc.getSendMethod) == null) {
          RunActionsServiceGrpc.getSendMethod = getSendMethod =
              io.grpc.MethodDescriptor.<dev.actonce.v1.SendRequest, dev.actonce.v1.SendResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Send"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.actonce.v1.SendRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.actonce.v1.SendResponse.getDefaultInstance()))
              .setSchemaDescriptor(new RunActionsServiceMethodDescriptorSupplier("Send"))
              .build();
        }
      }
    }
    return getSendMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.actonce.v1.ReadRequest,
      dev.actonce.v1.ReadResponse> getReadMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Read",
      requestType = dev.actonce.v1.ReadRequest.class,
      responseType = dev.actonce.v1.ReadResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.actonce.v1.ReadRequest,
      dev.actonce.v1.ReadResponse> getReadMethod() {
    io.grpc.MethodDescriptor<dev.actonce.v1.ReadRequest, dev.actonce.v1.ReadResponse> getReadMethod;
    if ((getReadMethod = RunActionsServiceGrpc.getReadMethod) == null) {
      synchronized (RunActionsServiceGrpc.class) {
        if ((getReadMethod = RunActionsServiceGrpc.getReadMethod) == null) {
          RunActionsServiceGrpc.getReadMethod = getReadMethod =
              io.grpc.MethodDescriptor.<dev.actonce.v1.ReadRequest, dev.actonce.v1.ReadResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Read"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.actonce.v1.ReadRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.actonce.v1.ReadResponse.getDefaultInstance()))
              .setSchemaDescriptor(new RunActionsServiceMethodDescriptorSupplier("Read"))
              .build();
        }
      }
    }
    return getReadMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.actonce.v1.EndAttemptRequest,
      dev.actonce.v1.EndAttemptResponse> getEndAttemptMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "EndAttempt",
      requestType = dev.actonce.v1.EndAttemptRequest.class,
      responseType = dev.actonce.v1.EndAttemptResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.actonce.v1.EndAttemptRequest,
      dev.actonce.v1.EndAttemptResponse> getEndAttemptMethod() {
    io.grpc.MethodDescriptor<dev.actonce.v1.EndAttemptRequest, dev.actonce.v1.EndAttemptResponse> getEndAttemptMethod;
    if ((getEndAttemptMethod = RunActionsServiceGrpc.getEndAttemptMethod) == null) {
      synchronized (RunActionsServiceGrpc.class) {
        if ((getEndAttemptMethod = RunActionsServiceGrpc.getEndAttemptMethod) == null) {
          RunActionsServiceGrpc.getEndAttemptMethod = getEndAttemptMethod =
              io.grpc.MethodDescriptor.<dev.actonce.v1.EndAttemptRequest, dev.actonce.v1.EndAttemptResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "EndAttempt"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.actonce.v1.EndAttemptRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.actonce.v1.EndAttemptResponse.getDefaultInstance()))
              .setSchemaDescriptor(new RunActionsServiceMethodDescriptorSupplier("EndAttempt"))
              .build();
        }
      }
    }
    return getEndAttemptMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.actonce.v1.ExtendLeaseRequest,
      dev.actonce.v1.ExtendLeaseResponse> getExtendLeaseMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "ExtendLease",
      requestType = dev.actonce.v1.ExtendLeaseRequest.class,
      responseType = dev.actonce.v1.ExtendLeaseResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.actonce.v1.ExtendLeaseRequest,
      dev.actonce.v1.ExtendLeaseResponse> getExtendLeaseMethod() {
    io.grpc.MethodDescriptor<dev.actonce.v1.ExtendLeaseRequest, dev.actonce.v1.ExtendLeaseResponse> getExtendLeaseMethod;
    if ((getExtendLeaseMethod = RunActionsServiceGrpc.getExtendLeaseMethod) == null) {
      synchronized (RunActionsServiceGrpc.class) {
        if ((getExtendLeaseMethod = RunActionsServiceGrpc.getExtendLeaseMethod) == null) {
          RunActionsServiceGrpc.getExtendLeaseMethod = getExtendLeaseMethod =
              io.grpc.MethodDescriptor.<dev.actonce.v1.ExtendLeaseRequest, dev.actonce.v1.ExtendLeaseResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "ExtendLease"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.actonce.v1.ExtendLeaseRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.actonce.v1.ExtendLeaseResponse.getDefaultInstance()))
              .setSchemaDescriptor(new RunActionsServiceMethodDescriptorSupplier("ExtendLease"))
              .build();
        }
      }
    }
    return getExtendLeaseMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.actonce.v1.BeginStepRequest,
      dev.actonce.v1.BeginStepResponse> getBeginStepMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "BeginStep",
      requestType = dev.actonce.v1.BeginStepRequest.class,
      responseType = dev.actonce.v1.BeginStepResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.actonce.v1.BeginStepRequest,
      dev.actonce.v1.BeginStepResponse> getBeginStepMethod() {
    io.grpc.MethodDescriptor<dev.actonce.v1.BeginStepRequest, dev.actonce.v1.BeginStepResponse> getBeginStepMethod;
    if ((getBeginStepMethod = RunActionsServiceGrpc.getBeginStepMethod) == null) {
      synchronized (RunActionsServiceGrpc.class) {
        if ((getBeginStepMethod = RunActionsServiceGrpc.getBeginStepMethod) == null) {
          RunActionsServiceGrpc.getBeginStepMethod = getBeginStepMethod =
              io.grpc.MethodDescriptor.<dev.actonce.v1.BeginStepRequest, dev.actonce.v1.BeginStepResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "BeginStep"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.actonce.v1.BeginStepRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.actonce.v1.BeginStepResponse.getDefaultInstance()))
              .setSchemaDescriptor(new RunActionsServiceMethodDescriptorSupplier("BeginStep"))
              .build();
        }
      }
    }
    return getBeginStepMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.actonce.v1.EndStepRequest,
      dev.actonce.v1.EndStepResponse> getEndStepMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "EndStep",
      requestType = dev.actonce.v1.EndStepRequest.class,
      responseType = dev.actonce.v1.EndStepResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.actonce.v1.EndStepRequest,
      dev.actonce.v1.EndStepResponse> getEndStepMethod() {
    io.grpc.MethodDescriptor<dev.actonce.v1.EndStepRequest, dev.actonce.v1.EndStepResponse> getEndStepMethod;
    if ((getEndStepMethod = RunActionsServiceGrpc.getEndStepMethod) == null) {
      synchronized (RunActionsServiceGrpc.class) {
        if ((getEndStepMethod = RunActionsServiceGrpc.getEndStepMethod) == null) {
          RunActionsServiceGrpc.getEndStepMethod = getEndStepMethod =
              io.grpc.MethodDescriptor.<dev.actonce.v1.EndStepRequest, dev.actonce.v1.EndStepResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "EndStep"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.actonce.v1.EndStepRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.actonce.v1.EndStepResponse.getDefaultInstance()))
              .setSchemaDescriptor(new RunActionsServiceMethodDescriptorSupplier("EndStep"))
              .build();
        }
      }
    }
    return getEndStepMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.actonce.v1.AbortStepRequest,
      dev.actonce.v1.AbortStepResponse> getAbortStepMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "AbortStep",
      requestType = dev.actonce.v1.AbortStepRequest.class,
      responseType = dev.actonce.v1.AbortStepResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.actonce.v1.AbortStepRequest,
      dev.actonce.v1.AbortStepResponse> getAbortStepMethod() {
    io.grpc.MethodDescriptor<dev.actonce.v1.AbortStepRequest, dev.actonce.v1.AbortStepResponse> getAbortStepMethod;
    if ((getAbortStepMethod = RunActionsServiceGrpc.getAbortStepMethod) == null) {
      synchronized (RunActionsServiceGrpc.class) {
        if ((getAbortStepMethod = RunActionsServiceGrpc.getAbortStepMethod) == null) {
          RunActionsServiceGrpc.getAbortStepMethod = getAbortStepMethod =
              io.grpc.MethodDescriptor.<dev.actonce.v1.AbortStepRequest, dev.actonce.v1.AbortStepResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "AbortStep"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.actonce.v1.AbortStepRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.actonce.v1.AbortStepResponse.getDefaultInstance()))
              .setSchemaDescriptor(new RunActionsServiceMethodDescriptorSupplier("AbortStep"))
              .build();
        }
      }
    }
    return getAbortStepMethod;
  }

  /**
   * Creates a new async stub that supports all call types for the service
   */
  public static RunActionsServiceStub newStub(io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<RunActionsServiceStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<RunActionsServiceStub>() {
        @java.lang.Override
        public RunActionsServiceStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new RunActionsServiceStub(channel, callOptions);
        }
      };
    return RunActionsServiceStub.newStub(factory, channel);
  }

  /**
   * Creates a new blocking-style stub that supports all types of calls on the service
   */
  public static RunActionsServiceBlockingV2Stub newBlockingV2Stub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<RunActionsServiceBlockingV2Stub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<RunActionsServiceBlockingV2Stub>() {
        @java.lang.Override
        public RunActionsServiceBlockingV2Stub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new RunActionsServiceBlockingV2Stub(channel, callOptions);
        }
      };
    return RunActionsServiceBlockingV2Stub.newStub(factory, channel);
  }

  /**
   * Creates a new blocking-style stub that supports unary and streaming output calls on the service
   */
  public static RunActionsServiceBlockingStub newBlockingStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<RunActionsServiceBlockingStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<RunActionsServiceBlockingStub>() {
        @java.lang.Override
        public RunActionsServiceBlockingStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new RunActionsServiceBlockingStub(channel, callOptions);
        }
      };
    return RunActionsServiceBlockingStub.newStub(factory, channel);
  }

  /**
   * Creates a new ListenableFuture-style stub that supports unary calls on the service
   */
  public static RunActionsServiceFutureStub newFutureStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<RunActionsServiceFutureStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<RunActionsServiceFutureStub>() {
        @java.lang.Override
        public RunActionsServiceFutureStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new RunActionsServiceFutureStub(channel, callOptions);
        }
      };
    return RunActionsServiceFutureStub.newStub(factory, channel);
  }

  /**
   * <pre>
   * RunActionsService is what an agent calls, through its sidecar, to act on the
   * artifact store. Every write lands once however often the run is retried:
   * its id is derived from the run, the attempt's checkpoint and what the write
   * is, and an audit event is durable before any answer is sent.
   * Errors carry google.rpc.ErrorInfo (domain "actonce") with a reason and
   * metadata.failure_class: REFUSED, RETRYABLE, PERMANENT or UNKNOWN.
   * </pre>
   */
  public interface AsyncService {

    /**
     * <pre>
     * BeginAttempt starts one try of a run from its last checkpoint.
     * </pre>
     */
    default void beginAttempt(dev.actonce.v1.BeginAttemptRequest request,
        io.grpc.stub.StreamObserver<dev.actonce.v1.BeginAttemptResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getBeginAttemptMethod(), responseObserver);
    }

    /**
     * <pre>
     * Create makes an artifact, or proposes one when propose is set.
     * </pre>
     */
    default void create(dev.actonce.v1.CreateRequest request,
        io.grpc.stub.StreamObserver<dev.actonce.v1.CreateResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getCreateMethod(), responseObserver);
    }

    /**
     * <pre>
     * Edit sets one value at one JSON Pointer path of an artifact, or proposes
     * that change when propose is set. Skipped when the value is already there.
     * </pre>
     */
    default void edit(dev.actonce.v1.EditRequest request,
        io.grpc.stub.StreamObserver<dev.actonce.v1.EditResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getEditMethod(), responseObserver);
    }

    /**
     * <pre>
     * Notice posts a message of kind "notice" to a thread: it starts and
     * steers no turn. The default way for an agent to speak.
     * </pre>
     */
    default void notice(dev.actonce.v1.NoticeRequest request,
        io.grpc.stub.StreamObserver<dev.actonce.v1.NoticeResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getNoticeMethod(), responseObserver);
    }

    /**
     * <pre>
     * CreateThread makes a conversation thread.
     * </pre>
     */
    default void createThread(dev.actonce.v1.CreateThreadRequest request,
        io.grpc.stub.StreamObserver<dev.actonce.v1.CreateThreadResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getCreateThreadMethod(), responseObserver);
    }

    /**
     * <pre>
     * Send posts a message of kind "message" and asks for the thread's turn.
     * Only rules on the sidecar's send allowlist may send.
     * </pre>
     */
    default void send(dev.actonce.v1.SendRequest request,
        io.grpc.stub.StreamObserver<dev.actonce.v1.SendResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getSendMethod(), responseObserver);
    }

    /**
     * <pre>
     * Read returns an artifact or a thread's messages. Reads are audited
     * fail-soft: a ledger failure does not fail a read.
     * </pre>
     */
    default void read(dev.actonce.v1.ReadRequest request,
        io.grpc.stub.StreamObserver<dev.actonce.v1.ReadResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getReadMethod(), responseObserver);
    }

    /**
     * <pre>
     * EndAttempt closes an attempt and returns how its writes went.
     * </pre>
     */
    default void endAttempt(dev.actonce.v1.EndAttemptRequest request,
        io.grpc.stub.StreamObserver<dev.actonce.v1.EndAttemptResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getEndAttemptMethod(), responseObserver);
    }

    /**
     * <pre>
     * ExtendLease moves the attempt's lease deadline.
     * </pre>
     */
    default void extendLease(dev.actonce.v1.ExtendLeaseRequest request,
        io.grpc.stub.StreamObserver<dev.actonce.v1.ExtendLeaseResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getExtendLeaseMethod(), responseObserver);
    }

    /**
     * <pre>
     * BeginStep audits the start of one of the agent's own tool calls (a call
     * the sidecar does not make itself) before the agent makes it.
     * </pre>
     */
    default void beginStep(dev.actonce.v1.BeginStepRequest request,
        io.grpc.stub.StreamObserver<dev.actonce.v1.BeginStepResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getBeginStepMethod(), responseObserver);
    }

    /**
     * <pre>
     * EndStep audits the end of a step with the tool's result.
     * </pre>
     */
    default void endStep(dev.actonce.v1.EndStepRequest request,
        io.grpc.stub.StreamObserver<dev.actonce.v1.EndStepResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getEndStepMethod(), responseObserver);
    }

    /**
     * <pre>
     * AbortStep declares that a begun step's effect did not happen: the call
     * was refused before it acted, or never made (interrupted before it). It is
     * audited like EndStep, and a later attempt may run the step again.
     * </pre>
     */
    default void abortStep(dev.actonce.v1.AbortStepRequest request,
        io.grpc.stub.StreamObserver<dev.actonce.v1.AbortStepResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getAbortStepMethod(), responseObserver);
    }
  }

  /**
   * Base class for the server implementation of the service RunActionsService.
   * <pre>
   * RunActionsService is what an agent calls, through its sidecar, to act on the
   * artifact store. Every write lands once however often the run is retried:
   * its id is derived from the run, the attempt's checkpoint and what the write
   * is, and an audit event is durable before any answer is sent.
   * Errors carry google.rpc.ErrorInfo (domain "actonce") with a reason and
   * metadata.failure_class: REFUSED, RETRYABLE, PERMANENT or UNKNOWN.
   * </pre>
   */
  public static abstract class RunActionsServiceImplBase
      implements io.grpc.BindableService, AsyncService {

    @java.lang.Override public final io.grpc.ServerServiceDefinition bindService() {
      return RunActionsServiceGrpc.bindService(this);
    }
  }

  /**
   * A stub to allow clients to do asynchronous rpc calls to service RunActionsService.
   * <pre>
   * RunActionsService is what an agent calls, through its sidecar, to act on the
   * artifact store. Every write lands once however often the run is retried:
   * its id is derived from the run, the attempt's checkpoint and what the write
   * is, and an audit event is durable before any answer is sent.
   * Errors carry google.rpc.ErrorInfo (domain "actonce") with a reason and
   * metadata.failure_class: REFUSED, RETRYABLE, PERMANENT or UNKNOWN.
   * </pre>
   */
  public static final class RunActionsServiceStub
      extends io.grpc.stub.AbstractAsyncStub<RunActionsServiceStub> {
    private RunActionsServiceStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected RunActionsServiceStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new RunActionsServiceStub(channel, callOptions);
    }

    /**
     * <pre>
     * BeginAttempt starts one try of a run from its last checkpoint.
     * </pre>
     */
    public void beginAttempt(dev.actonce.v1.BeginAttemptRequest request,
        io.grpc.stub.StreamObserver<dev.actonce.v1.BeginAttemptResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getBeginAttemptMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Create makes an artifact, or proposes one when propose is set.
     * </pre>
     */
    public void create(dev.actonce.v1.CreateRequest request,
        io.grpc.stub.StreamObserver<dev.actonce.v1.CreateResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getCreateMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Edit sets one value at one JSON Pointer path of an artifact, or proposes
     * that change when propose is set. Skipped when the value is already there.
     * </pre>
     */
    public void edit(dev.actonce.v1.EditRequest request,
        io.grpc.stub.StreamObserver<dev.actonce.v1.EditResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getEditMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Notice posts a message of kind "notice" to a thread: it starts and
     * steers no turn. The default way for an agent to speak.
     * </pre>
     */
    public void notice(dev.actonce.v1.NoticeRequest request,
        io.grpc.stub.StreamObserver<dev.actonce.v1.NoticeResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getNoticeMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * CreateThread makes a conversation thread.
     * </pre>
     */
    public void createThread(dev.actonce.v1.CreateThreadRequest request,
        io.grpc.stub.StreamObserver<dev.actonce.v1.CreateThreadResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getCreateThreadMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Send posts a message of kind "message" and asks for the thread's turn.
     * Only rules on the sidecar's send allowlist may send.
     * </pre>
     */
    public void send(dev.actonce.v1.SendRequest request,
        io.grpc.stub.StreamObserver<dev.actonce.v1.SendResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getSendMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Read returns an artifact or a thread's messages. Reads are audited
     * fail-soft: a ledger failure does not fail a read.
     * </pre>
     */
    public void read(dev.actonce.v1.ReadRequest request,
        io.grpc.stub.StreamObserver<dev.actonce.v1.ReadResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getReadMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * EndAttempt closes an attempt and returns how its writes went.
     * </pre>
     */
    public void endAttempt(dev.actonce.v1.EndAttemptRequest request,
        io.grpc.stub.StreamObserver<dev.actonce.v1.EndAttemptResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getEndAttemptMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * ExtendLease moves the attempt's lease deadline.
     * </pre>
     */
    public void extendLease(dev.actonce.v1.ExtendLeaseRequest request,
        io.grpc.stub.StreamObserver<dev.actonce.v1.ExtendLeaseResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getExtendLeaseMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * BeginStep audits the start of one of the agent's own tool calls (a call
     * the sidecar does not make itself) before the agent makes it.
     * </pre>
     */
    public void beginStep(dev.actonce.v1.BeginStepRequest request,
        io.grpc.stub.StreamObserver<dev.actonce.v1.BeginStepResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getBeginStepMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * EndStep audits the end of a step with the tool's result.
     * </pre>
     */
    public void endStep(dev.actonce.v1.EndStepRequest request,
        io.grpc.stub.StreamObserver<dev.actonce.v1.EndStepResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getEndStepMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * AbortStep declares that a begun step's effect did not happen: the call
     * was refused before it acted, or never made (interrupted before it). It is
     * audited like EndStep, and a later attempt may run the step again.
     * </pre>
     */
    public void abortStep(dev.actonce.v1.AbortStepRequest request,
        io.grpc.stub.StreamObserver<dev.actonce.v1.AbortStepResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getAbortStepMethod(), getCallOptions()), request, responseObserver);
    }
  }

  /**
   * A stub to allow clients to do synchronous rpc calls to service RunActionsService.
   * <pre>
   * RunActionsService is what an agent calls, through its sidecar, to act on the
   * artifact store. Every write lands once however often the run is retried:
   * its id is derived from the run, the attempt's checkpoint and what the write
   * is, and an audit event is durable before any answer is sent.
   * Errors carry google.rpc.ErrorInfo (domain "actonce") with a reason and
   * metadata.failure_class: REFUSED, RETRYABLE, PERMANENT or UNKNOWN.
   * </pre>
   */
  public static final class RunActionsServiceBlockingV2Stub
      extends io.grpc.stub.AbstractBlockingStub<RunActionsServiceBlockingV2Stub> {
    private RunActionsServiceBlockingV2Stub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected RunActionsServiceBlockingV2Stub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new RunActionsServiceBlockingV2Stub(channel, callOptions);
    }

    /**
     * <pre>
     * BeginAttempt starts one try of a run from its last checkpoint.
     * </pre>
     */
    public dev.actonce.v1.BeginAttemptResponse beginAttempt(dev.actonce.v1.BeginAttemptRequest request) throws io.grpc.StatusException {
      return io.grpc.stub.ClientCalls.blockingV2UnaryCall(
          getChannel(), getBeginAttemptMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Create makes an artifact, or proposes one when propose is set.
     * </pre>
     */
    public dev.actonce.v1.CreateResponse create(dev.actonce.v1.CreateRequest request) throws io.grpc.StatusException {
      return io.grpc.stub.ClientCalls.blockingV2UnaryCall(
          getChannel(), getCreateMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Edit sets one value at one JSON Pointer path of an artifact, or proposes
     * that change when propose is set. Skipped when the value is already there.
     * </pre>
     */
    public dev.actonce.v1.EditResponse edit(dev.actonce.v1.EditRequest request) throws io.grpc.StatusException {
      return io.grpc.stub.ClientCalls.blockingV2UnaryCall(
          getChannel(), getEditMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Notice posts a message of kind "notice" to a thread: it starts and
     * steers no turn. The default way for an agent to speak.
     * </pre>
     */
    public dev.actonce.v1.NoticeResponse notice(dev.actonce.v1.NoticeRequest request) throws io.grpc.StatusException {
      return io.grpc.stub.ClientCalls.blockingV2UnaryCall(
          getChannel(), getNoticeMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * CreateThread makes a conversation thread.
     * </pre>
     */
    public dev.actonce.v1.CreateThreadResponse createThread(dev.actonce.v1.CreateThreadRequest request) throws io.grpc.StatusException {
      return io.grpc.stub.ClientCalls.blockingV2UnaryCall(
          getChannel(), getCreateThreadMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Send posts a message of kind "message" and asks for the thread's turn.
     * Only rules on the sidecar's send allowlist may send.
     * </pre>
     */
    public dev.actonce.v1.SendResponse send(dev.actonce.v1.SendRequest request) throws io.grpc.StatusException {
      return io.grpc.stub.ClientCalls.blockingV2UnaryCall(
          getChannel(), getSendMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Read returns an artifact or a thread's messages. Reads are audited
     * fail-soft: a ledger failure does not fail a read.
     * </pre>
     */
    public dev.actonce.v1.ReadResponse read(dev.actonce.v1.ReadRequest request) throws io.grpc.StatusException {
      return io.grpc.stub.ClientCalls.blockingV2UnaryCall(
          getChannel(), getReadMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * EndAttempt closes an attempt and returns how its writes went.
     * </pre>
     */
    public dev.actonce.v1.EndAttemptResponse endAttempt(dev.actonce.v1.EndAttemptRequest request) throws io.grpc.StatusException {
      return io.grpc.stub.ClientCalls.blockingV2UnaryCall(
          getChannel(), getEndAttemptMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * ExtendLease moves the attempt's lease deadline.
     * </pre>
     */
    public dev.actonce.v1.ExtendLeaseResponse extendLease(dev.actonce.v1.ExtendLeaseRequest request) throws io.grpc.StatusException {
      return io.grpc.stub.ClientCalls.blockingV2UnaryCall(
          getChannel(), getExtendLeaseMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * BeginStep audits the start of one of the agent's own tool calls (a call
     * the sidecar does not make itself) before the agent makes it.
     * </pre>
     */
    public dev.actonce.v1.BeginStepResponse beginStep(dev.actonce.v1.BeginStepRequest request) throws io.grpc.StatusException {
      return io.grpc.stub.ClientCalls.blockingV2UnaryCall(
          getChannel(), getBeginStepMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * EndStep audits the end of a step with the tool's result.
     * </pre>
     */
    public dev.actonce.v1.EndStepResponse endStep(dev.actonce.v1.EndStepRequest request) throws io.grpc.StatusException {
      return io.grpc.stub.ClientCalls.blockingV2UnaryCall(
          getChannel(), getEndStepMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * AbortStep declares that a begun step's effect did not happen: the call
     * was refused before it acted, or never made (interrupted before it). It is
     * audited like EndStep, and a later attempt may run the step again.
     * </pre>
     */
    public dev.actonce.v1.AbortStepResponse abortStep(dev.actonce.v1.AbortStepRequest request) throws io.grpc.StatusException {
      return io.grpc.stub.ClientCalls.blockingV2UnaryCall(
          getChannel(), getAbortStepMethod(), getCallOptions(), request);
    }
  }

  /**
   * A stub to allow clients to do limited synchronous rpc calls to service RunActionsService.
   * <pre>
   * RunActionsService is what an agent calls, through its sidecar, to act on the
   * artifact store. Every write lands once however often the run is retried:
   * its id is derived from the run, the attempt's checkpoint and what the write
   * is, and an audit event is durable before any answer is sent.
   * Errors carry google.rpc.ErrorInfo (domain "actonce") with a reason and
   * metadata.failure_class: REFUSED, RETRYABLE, PERMANENT or UNKNOWN.
   * </pre>
   */
  public static final class RunActionsServiceBlockingStub
      extends io.grpc.stub.AbstractBlockingStub<RunActionsServiceBlockingStub> {
    private RunActionsServiceBlockingStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected RunActionsServiceBlockingStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new RunActionsServiceBlockingStub(channel, callOptions);
    }

    /**
     * <pre>
     * BeginAttempt starts one try of a run from its last checkpoint.
     * </pre>
     */
    public dev.actonce.v1.BeginAttemptResponse beginAttempt(dev.actonce.v1.BeginAttemptRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getBeginAttemptMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Create makes an artifact, or proposes one when propose is set.
     * </pre>
     */
    public dev.actonce.v1.CreateResponse create(dev.actonce.v1.CreateRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getCreateMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Edit sets one value at one JSON Pointer path of an artifact, or proposes
     * that change when propose is set. Skipped when the value is already there.
     * </pre>
     */
    public dev.actonce.v1.EditResponse edit(dev.actonce.v1.EditRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getEditMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Notice posts a message of kind "notice" to a thread: it starts and
     * steers no turn. The default way for an agent to speak.
     * </pre>
     */
    public dev.actonce.v1.NoticeResponse notice(dev.actonce.v1.NoticeRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getNoticeMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * CreateThread makes a conversation thread.
     * </pre>
     */
    public dev.actonce.v1.CreateThreadResponse createThread(dev.actonce.v1.CreateThreadRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getCreateThreadMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Send posts a message of kind "message" and asks for the thread's turn.
     * Only rules on the sidecar's send allowlist may send.
     * </pre>
     */
    public dev.actonce.v1.SendResponse send(dev.actonce.v1.SendRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getSendMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Read returns an artifact or a thread's messages. Reads are audited
     * fail-soft: a ledger failure does not fail a read.
     * </pre>
     */
    public dev.actonce.v1.ReadResponse read(dev.actonce.v1.ReadRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getReadMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * EndAttempt closes an attempt and returns how its writes went.
     * </pre>
     */
    public dev.actonce.v1.EndAttemptResponse endAttempt(dev.actonce.v1.EndAttemptRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getEndAttemptMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * ExtendLease moves the attempt's lease deadline.
     * </pre>
     */
    public dev.actonce.v1.ExtendLeaseResponse extendLease(dev.actonce.v1.ExtendLeaseRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getExtendLeaseMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * BeginStep audits the start of one of the agent's own tool calls (a call
     * the sidecar does not make itself) before the agent makes it.
     * </pre>
     */
    public dev.actonce.v1.BeginStepResponse beginStep(dev.actonce.v1.BeginStepRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getBeginStepMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * EndStep audits the end of a step with the tool's result.
     * </pre>
     */
    public dev.actonce.v1.EndStepResponse endStep(dev.actonce.v1.EndStepRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getEndStepMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * AbortStep declares that a begun step's effect did not happen: the call
     * was refused before it acted, or never made (interrupted before it). It is
     * audited like EndStep, and a later attempt may run the step again.
     * </pre>
     */
    public dev.actonce.v1.AbortStepResponse abortStep(dev.actonce.v1.AbortStepRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getAbortStepMethod(), getCallOptions(), request);
    }
  }

  /**
   * A stub to allow clients to do ListenableFuture-style rpc calls to service RunActionsService.
   * <pre>
   * RunActionsService is what an agent calls, through its sidecar, to act on the
   * artifact store. Every write lands once however often the run is retried:
   * its id is derived from the run, the attempt's checkpoint and what the write
   * is, and an audit event is durable before any answer is sent.
   * Errors carry google.rpc.ErrorInfo (domain "actonce") with a reason and
   * metadata.failure_class: REFUSED, RETRYABLE, PERMANENT or UNKNOWN.
   * </pre>
   */
  public static final class RunActionsServiceFutureStub
      extends io.grpc.stub.AbstractFutureStub<RunActionsServiceFutureStub> {
    private RunActionsServiceFutureStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected RunActionsServiceFutureStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new RunActionsServiceFutureStub(channel, callOptions);
    }

    /**
     * <pre>
     * BeginAttempt starts one try of a run from its last checkpoint.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.actonce.v1.BeginAttemptResponse> beginAttempt(
        dev.actonce.v1.BeginAttemptRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getBeginAttemptMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Create makes an artifact, or proposes one when propose is set.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.actonce.v1.CreateResponse> create(
        dev.actonce.v1.CreateRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getCreateMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Edit sets one value at one JSON Pointer path of an artifact, or proposes
     * that change when propose is set. Skipped when the value is already there.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.actonce.v1.EditResponse> edit(
        dev.actonce.v1.EditRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getEditMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Notice posts a message of kind "notice" to a thread: it starts and
     * steers no turn. The default way for an agent to speak.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.actonce.v1.NoticeResponse> notice(
        dev.actonce.v1.NoticeRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getNoticeMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * CreateThread makes a conversation thread.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.actonce.v1.CreateThreadResponse> createThread(
        dev.actonce.v1.CreateThreadRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getCreateThreadMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Send posts a message of kind "message" and asks for the thread's turn.
     * Only rules on the sidecar's send allowlist may send.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.actonce.v1.SendResponse> send(
        dev.actonce.v1.SendRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getSendMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Read returns an artifact or a thread's messages. Reads are audited
     * fail-soft: a ledger failure does not fail a read.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.actonce.v1.ReadResponse> read(
        dev.actonce.v1.ReadRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getReadMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * EndAttempt closes an attempt and returns how its writes went.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.actonce.v1.EndAttemptResponse> endAttempt(
        dev.actonce.v1.EndAttemptRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getEndAttemptMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * ExtendLease moves the attempt's lease deadline.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.actonce.v1.ExtendLeaseResponse> extendLease(
        dev.actonce.v1.ExtendLeaseRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getExtendLeaseMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * BeginStep audits the start of one of the agent's own tool calls (a call
     * the sidecar does not make itself) before the agent makes it.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.actonce.v1.BeginStepResponse> beginStep(
        dev.actonce.v1.BeginStepRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getBeginStepMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * EndStep audits the end of a step with the tool's result.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.actonce.v1.EndStepResponse> endStep(
        dev.actonce.v1.EndStepRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getEndStepMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * AbortStep declares that a begun step's effect did not happen: the call
     * was refused before it acted, or never made (interrupted before it). It is
     * audited like EndStep, and a later attempt may run the step again.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.actonce.v1.AbortStepResponse> abortStep(
        dev.actonce.v1.AbortStepRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getAbortStepMethod(), getCallOptions()), request);
    }
  }

  private static final int METHODID_BEGIN_ATTEMPT = 0;
  private static final int METHODID_CREATE = 1;
  private static final int METHODID_EDIT = 2;
  private static final int METHODID_NOTICE = 3;
  private static final int METHODID_CREATE_THREAD = 4;
  private static final int METHODID_SEND = 5;
  private static final int METHODID_READ = 6;
  private static final int METHODID_END_ATTEMPT = 7;
  private static final int METHODID_EXTEND_LEASE = 8;
  private static final int METHODID_BEGIN_STEP = 9;
  private static final int METHODID_END_STEP = 10;
  private static final int METHODID_ABORT_STEP = 11;

  private static final class MethodHandlers<Req, Resp> implements
      io.grpc.stub.ServerCalls.UnaryMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ServerStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ClientStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.BidiStreamingMethod<Req, Resp> {
    private final AsyncService serviceImpl;
    private final int methodId;

    MethodHandlers(AsyncService serviceImpl, int methodId) {
      this.serviceImpl = serviceImpl;
      this.methodId = methodId;
    }

    @java.lang.Override
    @java.lang.SuppressWarnings("unchecked")
    public void invoke(Req request, io.grpc.stub.StreamObserver<Resp> responseObserver) {
      switch (methodId) {
        case METHODID_BEGIN_ATTEMPT:
          serviceImpl.beginAttempt((dev.actonce.v1.BeginAttemptRequest) request,
              (io.grpc.stub.StreamObserver<dev.actonce.v1.BeginAttemptResponse>) responseObserver);
          break;
        case METHODID_CREATE:
          serviceImpl.create((dev.actonce.v1.CreateRequest) request,
              (io.grpc.stub.StreamObserver<dev.actonce.v1.CreateResponse>) responseObserver);
          break;
        case METHODID_EDIT:
          serviceImpl.edit((dev.actonce.v1.EditRequest) request,
              (io.grpc.stub.StreamObserver<dev.actonce.v1.EditResponse>) responseObserver);
          break;
        case METHODID_NOTICE:
          serviceImpl.notice((dev.actonce.v1.NoticeRequest) request,
              (io.grpc.stub.StreamObserver<dev.actonce.v1.NoticeResponse>) responseObserver);
          break;
        case METHODID_CREATE_THREAD:
          serviceImpl.createThread((dev.actonce.v1.CreateThreadRequest) request,
              (io.grpc.stub.StreamObserver<dev.actonce.v1.CreateThreadResponse>) responseObserver);
          break;
        case METHODID_SEND:
          serviceImpl.send((dev.actonce.v1.SendRequest) request,
              (io.grpc.stub.StreamObserver<dev.actonce.v1.SendResponse>) responseObserver);
          break;
        case METHODID_READ:
          serviceImpl.read((dev.actonce.v1.ReadRequest) request,
              (io.grpc.stub.StreamObserver<dev.actonce.v1.ReadResponse>) responseObserver);
          break;
        case METHODID_END_ATTEMPT:
          serviceImpl.endAttempt((dev.actonce.v1.EndAttemptRequest) request,
              (io.grpc.stub.StreamObserver<dev.actonce.v1.EndAttemptResponse>) responseObserver);
          break;
        case METHODID_EXTEND_LEASE:
          serviceImpl.extendLease((dev.actonce.v1.ExtendLeaseRequest) request,
              (io.grpc.stub.StreamObserver<dev.actonce.v1.ExtendLeaseResponse>) responseObserver);
          break;
        case METHODID_BEGIN_STEP:
          serviceImpl.beginStep((dev.actonce.v1.BeginStepRequest) request,
              (io.grpc.stub.StreamObserver<dev.actonce.v1.BeginStepResponse>) responseObserver);
          break;
        case METHODID_END_STEP:
          serviceImpl.endStep((dev.actonce.v1.EndStepRequest) request,
              (io.grpc.stub.StreamObserver<dev.actonce.v1.EndStepResponse>) responseObserver);
          break;
        case METHODID_ABORT_STEP:
          serviceImpl.abortStep((dev.actonce.v1.AbortStepRequest) request,
              (io.grpc.stub.StreamObserver<dev.actonce.v1.AbortStepResponse>) responseObserver);
          break;
        default:
          throw new AssertionError();
      }
    }

    @java.lang.Override
    @java.lang.SuppressWarnings("unchecked")
    public io.grpc.stub.StreamObserver<Req> invoke(
        io.grpc.stub.StreamObserver<Resp> responseObserver) {
      switch (methodId) {
        default:
          throw new AssertionError();
      }
    }
  }

  public static final io.grpc.ServerServiceDefinition bindService(AsyncService service) {
    return io.grpc.ServerServiceDefinition.builder(getServiceDescriptor())
        .addMethod(
          getBeginAttemptMethod(),
          io.grpc.stub.ServerCalls.asyncUnaryCall(
            new MethodHandlers<
              dev.actonce.v1.BeginAttemptRequest,
              dev.actonce.v1.BeginAttemptResponse>(
                service, METHODID_BEGIN_ATTEMPT)))
        .addMethod(
          getCreateMethod(),
          io.grpc.stub.ServerCalls.asyncUnaryCall(
            new MethodHandlers<
              dev.actonce.v1.CreateRequest,
              dev.actonce.v1.CreateResponse>(
                service, METHODID_CREATE)))
        .addMethod(
          getEditMethod(),
          io.grpc.stub.ServerCalls.asyncUnaryCall(
            new MethodHandlers<
              dev.actonce.v1.EditRequest,
              dev.actonce.v1.EditResponse>(
                service, METHODID_EDIT)))
        .addMethod(
          getNoticeMethod(),
          io.grpc.stub.ServerCalls.asyncUnaryCall(
            new MethodHandlers<
              dev.actonce.v1.NoticeRequest,
              dev.actonce.v1.NoticeResponse>(
                service, METHODID_NOTICE)))
        .addMethod(
          getCreateThreadMethod(),
          io.grpc.stub.ServerCalls.asyncUnaryCall(
            new MethodHandlers<
              dev.actonce.v1.CreateThreadRequest,
              dev.actonce.v1.CreateThreadResponse>(
                service, METHODID_CREATE_THREAD)))
        .addMethod(
          getSendMethod(),
          io.grpc.stub.ServerCalls.asyncUnaryCall(
            new MethodHandlers<
              dev.actonce.v1.SendRequest,
              dev.actonce.v1.SendResponse>(
                service, METHODID_SEND)))
        .addMethod(
          getReadMethod(),
          io.grpc.stub.ServerCalls.asyncUnaryCall(
            new MethodHandlers<
              dev.actonce.v1.ReadRequest,
              dev.actonce.v1.ReadResponse>(
                service, METHODID_READ)))
        .addMethod(
          getEndAttemptMethod(),
          io.grpc.stub.ServerCalls.asyncUnaryCall(
            new MethodHandlers<
              dev.actonce.v1.EndAttemptRequest,
              dev.actonce.v1.EndAttemptResponse>(
                service, METHODID_END_ATTEMPT)))
        .addMethod(
          getExtendLeaseMethod(),
          io.grpc.stub.ServerCalls.asyncUnaryCall(
            new MethodHandlers<
              dev.actonce.v1.ExtendLeaseRequest,
              dev.actonce.v1.ExtendLeaseResponse>(
                service, METHODID_EXTEND_LEASE)))
        .addMethod(
          getBeginStepMethod(),
          io.grpc.stub.ServerCalls.asyncUnaryCall(
            new MethodHandlers<
              dev.actonce.v1.BeginStepRequest,
              dev.actonce.v1.BeginStepResponse>(
                service, METHODID_BEGIN_STEP)))
        .addMethod(
          getEndStepMethod(),
          io.grpc.stub.ServerCalls.asyncUnaryCall(
            new MethodHandlers<
              dev.actonce.v1.EndStepRequest,
              dev.actonce.v1.EndStepResponse>(
                service, METHODID_END_STEP)))
        .addMethod(
          getAbortStepMethod(),
          io.grpc.stub.ServerCalls.asyncUnaryCall(
            new MethodHandlers<
              dev.actonce.v1.AbortStepRequest,
              dev.actonce.v1.AbortStepResponse>(
                service, METHODID_ABORT_STEP)))
        .build();
  }

  private static abstract class RunActionsServiceBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoFileDescriptorSupplier, io.grpc.protobuf.ProtoServiceDescriptorSupplier {
    RunActionsServiceBaseDescriptorSupplier() {}

    @java.lang.Override
    public com.google.protobuf.Descriptors.FileDescriptor getFileDescriptor() {
      return dev.actonce.v1.RunActionsProto.getDescriptor();
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.ServiceDescriptor getServiceDescriptor() {
      return getFileDescriptor().findServiceByName("RunActionsService");
    }
  }

  private static final class RunActionsServiceFileDescriptorSupplier
      extends RunActionsServiceBaseDescriptorSupplier {
    RunActionsServiceFileDescriptorSupplier() {}
  }

  private static final class RunActionsServiceMethodDescriptorSupplier
      extends RunActionsServiceBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoMethodDescriptorSupplier {
    private final java.lang.String methodName;

    RunActionsServiceMethodDescriptorSupplier(java.lang.String methodName) {
      this.methodName = methodName;
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.MethodDescriptor getMethodDescriptor() {
      return getServiceDescriptor().findMethodByName(methodName);
    }
  }

  private static volatile io.grpc.ServiceDescriptor serviceDescriptor;

  public static io.grpc.ServiceDescriptor getServiceDescriptor() {
    io.grpc.ServiceDescriptor result = serviceDescriptor;
    if (result == null) {
      synchronized (RunActionsServiceGrpc.class) {
        result = serviceDescriptor;
        if (result == null) {
          serviceDescriptor = result = io.grpc.ServiceDescriptor.newBuilder(SERVICE_NAME)
              .setSchemaDescriptor(new RunActionsServiceFileDescriptorSupplier())
              .addMethod(getBeginAttemptMethod())
              .addMethod(getCreateMethod())
              .addMethod(getEditMethod())
              .addMethod(getNoticeMethod())
              .addMethod(getCreateThreadMethod())
              .addMethod(getSendMethod())
              .addMethod(getReadMethod())
              .addMethod(getEndAttemptMethod())
              .addMethod(getExtendLeaseMethod())
              .addMethod(getBeginStepMethod())
              .addMethod(getEndStepMethod())
              .addMethod(getAbortStepMethod())
              .build();
        }
      }
    }
    return result;
  }
}
