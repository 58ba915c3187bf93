package main

// gRPC through the sidecar (issue 12): a client speaking h2c to the sidecar and a gRPC server
// as the application, with a unary call, a failing call and a bidirectional stream.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-dev/sluice/internal/testutil/proc"
)

// rawCodec passes messages as bytes, so that the test needs no generated protobuf code.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "sluice-test-raw" }

// echoService echoes: Unary answers "echo:" + the request with the request's x-client
// metadata as x-seen header and a x-trailer trailer, Fail answers PermissionDenied, Bidi
// answers each message as it comes.
var echoService = grpc.ServiceDesc{
	ServiceName: "sluice.test.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Unary", Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var in []byte
			if err := dec(&in); err != nil {
				return nil, err
			}
			md, _ := metadata.FromIncomingContext(ctx)
			_ = grpc.SetHeader(ctx, metadata.Pairs("x-seen", fmt.Sprint(md.Get("x-client"))))
			_ = grpc.SetTrailer(ctx, metadata.Pairs("x-trailer", "end"))
			out := append([]byte("echo:"), in...)
			return &out, nil
		}},
		{MethodName: "Fail", Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var in []byte
			if err := dec(&in); err != nil {
				return nil, err
			}
			return nil, status.Error(codes.PermissionDenied, "refused by the application")
		}},
	},
	Streams: []grpc.StreamDesc{{
		StreamName: "Bidi", ServerStreams: true, ClientStreams: true,
		Handler: func(_ any, stream grpc.ServerStream) error {
			for {
				var m []byte
				if err := stream.RecvMsg(&m); errors.Is(err, io.EOF) {
					return nil
				} else if err != nil {
					return err
				}
				out := append([]byte("echo:"), m...)
				if err := stream.SendMsg(&out); err != nil {
					return err
				}
			}
		},
	}},
}

// TestGRPCThroughSidecar calls a gRPC application through the sidecar: unary with metadata,
// headers and trailers, an error status, and a bidirectional stream in which each message is
// sent only after the previous echo arrived (full duplex through the proxy).
func TestGRPCThroughSidecar(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}))
	srv.RegisterService(&echoService, struct{}{})
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	sc := startSidecar(t, "http://"+ln.Addr().String())

	conn, err := grpc.NewClient("passthrough:///"+sc.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), proc.Patience)
	defer cancel()

	t.Run("unary", func(t *testing.T) {
		in, out := []byte("hello"), []byte(nil)
		var header, trailer metadata.MD
		cctx := metadata.AppendToOutgoingContext(ctx, "x-client", "c1")
		if err := conn.Invoke(cctx, "/sluice.test.Echo/Unary", &in, &out, grpc.Header(&header), grpc.Trailer(&trailer)); err != nil {
			t.Fatalf("unary call: %v", err)
		}
		if string(out) != "echo:hello" {
			t.Errorf("answer %q", out)
		}
		if got := header.Get("x-seen"); len(got) != 1 || got[0] != "[c1]" {
			t.Errorf("response header x-seen %q: the request metadata did not arrive", got)
		}
		if got := trailer.Get("x-trailer"); len(got) != 1 || got[0] != "end" {
			t.Errorf("trailer x-trailer %q", got)
		}
	})
	t.Run("error-status", func(t *testing.T) {
		in, out := []byte("x"), []byte(nil)
		err := conn.Invoke(ctx, "/sluice.test.Echo/Fail", &in, &out)
		if s, _ := status.FromError(err); s.Code() != codes.PermissionDenied || s.Message() != "refused by the application" {
			t.Errorf("status %v, want the application's PermissionDenied", err)
		}
	})
	t.Run("bidi-stream", func(t *testing.T) {
		stream, err := conn.NewStream(ctx, &echoService.Streams[0], "/sluice.test.Echo/Bidi")
		if err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			m := fmt.Appendf(nil, "msg-%d", i)
			if err := stream.SendMsg(&m); err != nil {
				t.Fatalf("send %d: %v", i, err)
			}
			var got []byte
			if err := stream.RecvMsg(&got); err != nil || string(got) != "echo:"+string(m) {
				t.Fatalf("echo %d: %q %v", i, got, err)
			}
		}
		if err := stream.CloseSend(); err != nil {
			t.Fatal(err)
		}
		var end []byte
		if err := stream.RecvMsg(&end); !errors.Is(err, io.EOF) {
			t.Errorf("end of stream: %v, want io.EOF (status OK)", err)
		}
	})
}
