// Package gatewayapi holds the controller's tests against an API server that has Gateway API's
// standard-channel CRDs installed (those of the sigs.k8s.io/gateway-api module the build
// uses): policies attached to HTTPRoutes. The controller's own suite runs without them.
package gatewayapi
