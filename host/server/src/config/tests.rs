use super::*;

#[test]
fn unknown_fields_and_bad_ranges_are_named() {
    let e = ServeConfig::parse("sim:\n  speeed: 3\n", "serve.yaml").unwrap_err().to_string();
    assert!(e.starts_with("serve.yaml:2:3: sim.speeed: unknown field"), "{e}");
    let e = ServeConfig::parse("sim:\n  load: 0\n", "serve.yaml").unwrap_err().to_string();
    assert!(e.contains("sim.load"), "{e}");
    // 4·10⁹ nodes aborted on an allocation of 960 GB.
    let e = ServeConfig::parse("sim:\n  node_count: 4000000000\n", "serve.yaml").unwrap_err().to_string();
    assert!(e.contains("`sim.node_count` must be in 1..=100000"), "{e}");
    let e = ServeConfig::parse("engine:\n  tick_ms: 0\n", "serve.yaml").unwrap_err().to_string();
    assert!(e.contains("engine.tick_ms"), "{e}");
    let e = ServeConfig::parse("otel:\n  endpoint: localhost:4317\n", "s.yaml").unwrap_err().to_string();
    assert!(e.contains("otel.endpoint"), "{e}");
    let e = ServeConfig::parse("api_token: short\n", "s.yaml").unwrap_err().to_string();
    assert!(e.contains("api_token"), "{e}");
    let e = ServeConfig::parse("chaos:\n  schedule: nightly\n  campaign: c.yaml\n", "s.yaml").unwrap_err();
    assert!(e.to_string().contains("chaos.schedule") && e.to_string().contains("nightly"), "{e}");
    let e = ServeConfig::parse("chaos:\n  schedule: '0 3 * * *'\n  campaign: c.yaml\n  at: 3\n", "s.yaml");
    assert!(e.unwrap_err().to_string().contains("unknown field `at`"));
    let c = ServeConfig::parse("chaos:\n  schedule: '0 3 * * *'\n  campaign: c.yaml\n", "s.yaml").unwrap();
    assert!(c.chaos.unwrap().live_cluster, "campaigns run on the live cluster unless told otherwise");
    assert_eq!(ServeConfig::parse("{}", "s.yaml").unwrap(), ServeConfig::default());
}

#[test]
fn fine_tuning_settings_are_checked_at_load() {
    let parse = |text: &str| ServeConfig::parse(text, "s.yaml");
    let c = parse("learning:\n  schedule: '0 2 * * *'\n").unwrap().learning.unwrap();
    assert_eq!((c.plugin.as_str(), c.record, c.min_arrivals), ("learned", 20_000, 500));
    assert_eq!(c.training, TrainingConfig::default());
    for (text, field) in [
        ("learning:\n  schedule: sometimes\n", "learning.schedule"),
        ("learning:\n  schedule: '0 2 * * *'\n  min_gain: 1.5\n", "learning.min_gain"),
        ("learning:\n  schedule: '0 2 * * *'\n  record: 10\n", "learning.min_arrivals"),
        ("learning:\n  schedule: '0 2 * * *'\n  training: {generations: 0}\n", "learning.training.generations"),
        ("learning:\n  schedule: '0 2 * * *'\n  training: {scale: 2}\n", "learning.training.scale"),
        ("learning:\n  schedule: '0 2 * * *'\n  training: {sigma: -1}\n", "learning.training"),
        ("learning:\n  schedule: '0 2 * * *'\n  training: {epochs: 3}\n", "unknown field `epochs`"),
    ] {
        let e = parse(text).unwrap_err().to_string();
        assert!(e.contains(field), "{text}: {e}");
    }
}

#[test]
fn the_environment_fills_what_the_file_leaves_unset() {
    let env = |k: &str| match k {
        "OTEL_EXPORTER_OTLP_ENDPOINT" => Some("http://collector:4318".to_string()),
        "OTEL_EXPORTER_OTLP_PROTOCOL" => Some("http/protobuf".to_string()),
        "OTEL_TRACES_SAMPLER" => Some("parentbased_traceidratio".to_string()),
        "OTEL_TRACES_SAMPLER_ARG" => Some("0.25".to_string()),
        "OTEL_SERVICE_NAME" => Some("tessera-eu".to_string()),
        "TESSERA_API_TOKEN" => Some("0123456789abcdef".to_string()),
        _ => None,
    };
    let cfg = ServeConfig::default().with_env(env).unwrap();
    assert_eq!(cfg.otel.endpoint.as_deref(), Some("http://collector:4318"));
    assert_eq!(cfg.otel.protocol(), OtlpProtocol::HttpProtobuf);
    assert_eq!(cfg.otel.ratio(), 0.25);
    assert_eq!(cfg.otel.service_name, "tessera-eu");
    assert_eq!(cfg.api_token.as_deref(), Some("0123456789abcdef"));
    // The file wins over the environment.
    let file = ServeConfig::parse("otel:\n  endpoint: http://file:4317\n  protocol: grpc\n", "s.yaml").unwrap();
    let file = file.with_env(env).unwrap();
    assert_eq!(file.otel.endpoint.as_deref(), Some("http://file:4317"));
    assert_eq!(file.otel.protocol(), OtlpProtocol::Grpc);
    let e = ServeConfig::default()
        .with_env(|k| (k == "OTEL_EXPORTER_OTLP_PROTOCOL").then(|| "http/json".to_string()))
        .unwrap_err();
    assert!(e.to_string().contains("http/json"), "{e}");
}
