"""``actonce inject``: a mutating admission webhook that adds actonce as a native sidecar to
every pod annotated ``actonce.dev/inject: "true"``, with that pod's own settings from its
``actonce.dev/*`` annotations, and returns every other pod unchanged.

What it adds is the kustomize Component's (deploy/kubernetes/components/sidecar, packaged as
``sidecar/inject/component``): its container, volumes, labels and annotations are read from
there (:mod:`sidecar.inject.template`), never written a second time. :mod:`sidecar.inject.review`
answers an AdmissionReview (pure functions, a dict in, a dict out); :mod:`sidecar.inject.server`
serves it over HTTPS, as the Kubernetes API server requires.
"""
