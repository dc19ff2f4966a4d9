package envoyrls

import (
	"context"
	"fmt"
	"unicode/utf8"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/floodgatehq/floodgate/internal/auth"
)

// serviceDesc is go-control-plane's RateLimitService_ServiceDesc with a
// handler of its own: gRPC decodes a request before any handler or
// interceptor sees it, and answers a string that is not valid UTF-8 with
// Internal. Here the call's bytes are taken as they came (into an empty
// message, as unknown fields) and decoded by decodeRequest, which names
// the field at fault with InvalidArgument, as the service answers every
// other bad request. (Bytes that are not protobuf's wire format at all
// still fail in gRPC's own decoding, with Internal.)
var serviceDesc = grpc.ServiceDesc{
	ServiceName: rlsv3.RateLimitService_ServiceDesc.ServiceName,
	HandlerType: (*rlsv3.RateLimitServiceServer)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "ShouldRateLimit",
		Handler:    shouldRateLimitHandler,
	}},
	Streams:  []grpc.StreamDesc{},
	Metadata: rlsv3.RateLimitService_ServiceDesc.Metadata,
}

func shouldRateLimitHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	var raw emptypb.Empty
	if err := dec(&raw); err != nil {
		return nil, err
	}
	in := new(rlsv3.RateLimitRequest)
	decodeErr := decodeRequest(raw.ProtoReflect().GetUnknown(), in)
	handler := func(ctx context.Context, req any) (any, error) {
		if decodeErr != nil {
			return nil, decodeErr
		}
		return srv.(rlsv3.RateLimitServiceServer).ShouldRateLimit(ctx, req.(*rlsv3.RateLimitRequest))
	}
	if interceptor == nil {
		return handler(ctx, in)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: rlsv3.RateLimitService_ShouldRateLimit_FullMethodName}
	return interceptor(ctx, in, info, handler)
}

// decodeRequest decodes a RateLimitRequest's wire form into req. The
// error is an InvalidArgument status: naming the string field that is not
// valid UTF-8 (descriptors[0].entries[1].value), or saying the bytes are
// no RateLimitRequest.
func decodeRequest(data []byte, req *rlsv3.RateLimitRequest) error {
	err := proto.Unmarshal(data, req)
	if err == nil {
		return nil
	}
	if field, ok := invalidUTF8(data, req.ProtoReflect().Descriptor(), ""); ok {
		return status.Errorf(codes.InvalidArgument, "%s: not valid UTF-8", field)
	}
	return status.Errorf(codes.InvalidArgument, "not a RateLimitRequest: %v", err)
}

// invalidUTF8 walks a message's wire form and returns the path of its
// first string field that is not valid UTF-8, as the proto names its
// fields, with indexes for repeated ones. It stops, finding nothing, at
// bytes that are not a message.
func invalidUTF8(b []byte, md protoreflect.MessageDescriptor, path string) (string, bool) {
	seen := map[protowire.Number]int{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", false
		}
		b = b[n:]
		fd := md.Fields().ByNumber(num)
		if typ != protowire.BytesType || fd == nil {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return "", false
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return "", false
		}
		b = b[n:]
		p := string(fd.Name())
		if path != "" {
			p = path + "." + p
		}
		if fd.IsList() {
			p = fmt.Sprintf("%s[%d]", p, seen[num])
			seen[num]++
		}
		switch fd.Kind() {
		case protoreflect.StringKind:
			if !utf8.Valid(v) {
				return p, true
			}
		case protoreflect.MessageKind:
			if f, ok := invalidUTF8(v, fd.Message(), p); ok {
				return f, true
			}
		}
	}
	return "", false
}

// Authenticate returns a unary server interceptor that authenticates the
// calls of ShouldRateLimit when client authentication is on: clients has
// tokens loaded, or the call's connection presented a verified client
// certificate (a listener with a client CA). A call must then carry the
// metadata "authorization: Bearer <token>" of a client of clients, or of
// the admin token (admin returns the one in force; "" for none), or come
// over a connection with a verified certificate; else it fails with
// Unauthenticated. A token presented is checked even over such a
// connection. obs (nil: none) counts each call passed under its client's
// name, and each refused. Other methods (gRPC health) pass untouched.
// Chain it after Interceptor, so that refused calls are logged and
// counted there too.
func Authenticate(clients *auth.Clients, admin func() string, obs auth.Observer) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if info.FullMethod != rlsv3.RateLimitService_ShouldRateLimit_FullMethodName {
			return handler(ctx, req)
		}
		certified := false
		if p, ok := peer.FromContext(ctx); ok {
			if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.VerifiedChains) > 0 {
				certified = true
			}
		}
		tokens := clients.Enabled()
		if !tokens && !certified {
			return handler(ctx, req)
		}
		refuse := func(reason, msg string) error {
			if obs != nil {
				obs.AuthRefused("grpc", "client", reason)
			}
			return status.Error(codes.Unauthenticated, msg)
		}
		name := auth.ClientMTLS
		md, _ := metadata.FromIncomingContext(ctx)
		fields := md.Get("authorization")
		if len(fields) > 1 {
			return nil, refuse("invalid", "one authorization metadata entry, not several")
		}
		var token string
		ok := false
		if len(fields) == 1 {
			token, ok = auth.Bearer(fields[0])
		}
		switch {
		case ok && tokens:
			var known bool
			if name, known = clients.Lookup(token); !known {
				if adm := admin(); adm != "" && auth.NewToken(adm).Equal(token) {
					name, known = auth.ClientAdmin, true
				}
			}
			if !known {
				return nil, refuse("invalid", "wrong token")
			}
		case !certified:
			return nil, refuse("missing", "send the metadata authorization: Bearer <client token>")
		}
		if obs != nil {
			obs.ClientRequest("grpc", name)
		}
		return handler(ctx, req)
	}
}
