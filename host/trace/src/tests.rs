use super::*;

const NODES: &str = "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,P100\nn1,32000,131072,0,\n";
const PODS: &str = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n\
p0,12000,16384,1,1000,,LS,Running,0,12537496,0\n\
p1,6000,12288,1,460,T4|G2,LS,Running,427061,,427061\n\
p2,4000,0,0,0,,BE,Succeeded,,,\n";

fn nodes_err(text: &str) -> TraceError {
    read_nodes(text.as_bytes(), "nodes.csv").unwrap_err()
}

fn pods_err(text: &str) -> TraceError {
    read_pods(text.as_bytes(), "pods.csv").unwrap_err()
}

#[test]
fn reads_nodes_and_pods() {
    let nodes = read_nodes(NODES.as_bytes(), "nodes.csv").unwrap();
    assert_eq!(
        nodes[0],
        NodeRow { name: "n0".into(), cpu_milli: 64000, memory_mib: 262144, gpus: 2, model: "P100".into() }
    );
    assert_eq!(nodes[1].model, "");
    let pods = read_pods(PODS.as_bytes(), "pods.csv").unwrap();
    assert_eq!(pods.len(), 3);
    assert_eq!(pods[1].gpu_spec, ["G2", "T4"]);
    assert_eq!(pods[1].deletion_time, None);
    assert_eq!(pods[1].gpu_demand_milli(), 460);
    assert_eq!(pods[0].qos.as_deref(), Some("LS"));
    assert_eq!(pods[2].creation_time, None);
}

#[test]
fn five_column_pod_lists_are_accepted() {
    let pods = read_pods("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,2,8,1000\n".as_bytes(), "m.csv").unwrap();
    assert_eq!((pods[0].num_gpu, pods[0].qos.clone()), (8, None));
}

#[test]
fn malformed_values_name_file_line_and_column() {
    let e = pods_err(&PODS.replace("p1,6000,12288,1,460", "p1,6000,12288,one,460"));
    assert_eq!(e.to_string(), "pods.csv:3:4 (num_gpu): `one` is not a non-negative integer");
    let e = pods_err(&PODS.replace("p1,6000,12288,1,460", "p1,6000,12288,1,1460"));
    assert_eq!(e.to_string(), "pods.csv:3:5 (gpu_milli): 1460 is more than one GPU (1000)");
    let e = pods_err(&PODS.replace("p1,6000,12288,1,460", "p1,6000,12288,1,0"));
    assert!(e.to_string().starts_with("pods.csv:3:5 (gpu_milli): a GPU pod needs"), "{e}");
    let e = pods_err(&PODS.replace("p2,4000,0,0,0", "p2,4000,0,0,300"));
    assert!(e.to_string().starts_with("pods.csv:4:5 (gpu_milli): a GPU share without GPUs"), "{e}");
    let e = pods_err(&PODS.replace("p2,4000,0,0,0", "p2,4000,0,2,500"));
    assert!(e.to_string().contains("only single-GPU pods may share"), "{e}");
    let e = pods_err(&PODS.replace("Running,427061,,427061", "Running,-5,,427061"));
    assert_eq!(e.to_string(), "pods.csv:3:9 (creation_time): `-5` is not a non-negative integer");
    let e = pods_err(&PODS.replace("p2,", "p0,"));
    assert_eq!(e.to_string(), "pods.csv:4:1 (name): duplicate name `p0`");
    let e = nodes_err(&NODES.replace("n1,32000,131072,0,", "n1,32000,131072,4,"));
    assert_eq!(e.to_string(), "nodes.csv:3:5 (model): a node with GPUs needs a GPU model");
    let e = nodes_err(&NODES.replace(",2,P100", ",17,P100"));
    assert!(e.to_string().starts_with("nodes.csv:2:4 (gpu): 17 GPUs"), "{e}");
}

#[test]
fn structural_errors() {
    let e = pods_err("name,cpu_milli,num_gpu,gpu_milli\np,1,0,0\n");
    assert_eq!(e.line, 1);
    assert!(e.reason.contains("missing column `memory_mib`"), "{e}");
    let e = pods_err(&PODS.replace("p2,4000,0,0,0,,BE,Succeeded,,,", "p2,4000,0,0,0"));
    assert_eq!(e.to_string(), "pods.csv:4: row has 5 fields, the header has 11");
    assert_eq!(nodes_err("sn,cpu_milli,memory_mib,gpu,model\n").reason, "no nodes");
}

#[test]
fn arrival_orders() {
    assert_eq!(read_order("2\n0\n1\n2\n", "o.txt", 3).unwrap(), [2, 0, 1, 2]);
    assert_eq!(
        read_order("0\n3\n", "o.txt", 3).unwrap_err().to_string(),
        "o.txt:2:1 (index): index 3 is past the last pod row (3 rows)"
    );
    assert_eq!(
        read_order("0\n\n1\n", "o.txt", 3).unwrap_err().to_string(),
        "o.txt:2:1 (index): `` is not a pod row index"
    );
    assert_eq!(read_order("", "o.txt", 3).unwrap_err().reason, "no arrivals");
}

/// The real openb files parse, with the counts their README states.
#[test]
fn shared_openb_trace_loads() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces/openb");
    if !dir.exists() {
        // CI always has shared/ beside the clone; elsewhere say so loudly.
        assert!(std::env::var_os("CI").is_none(), "{} is missing in CI", dir.display());
        eprintln!("skipping: {} not found", dir.display());
        return;
    }
    let open = |f: &str| std::fs::File::open(dir.join(f)).unwrap();
    let nodes = read_nodes(open("openb_node_list_gpu_node.csv"), "gpu_node").unwrap();
    assert_eq!(nodes.len(), 1213);
    assert_eq!(nodes.iter().map(|n| n.gpus).sum::<u32>(), 6212);
    assert_eq!(read_nodes(open("openb_node_list_all_node.csv"), "all_node").unwrap().len(), 1523);
    for (w, n) in [("default", 8152), ("cpu100", 7853), ("gpushare40", 8152), ("gpuspec10", 8152), ("multigpu20", 8324)]
    {
        let pods = read_pods(open(&format!("openb_pod_list_{w}.csv")), w).unwrap();
        assert_eq!(pods.len(), n, "{w}");
        let order =
            std::fs::read_to_string(dir.join(format!("arrival-order/openb_pod_list_{w}_tune1.3_seed42.txt"))).unwrap();
        let order = read_order(&order, w, pods.len()).unwrap();
        let mut first: Vec<u32> = order[..pods.len()].to_vec();
        first.sort_unstable();
        assert!(first.iter().enumerate().all(|(i, &v)| i as u32 == v), "{w}: the first N arrivals are a permutation");
    }
}

#[test]
fn far_future_and_overlong_times_are_refused_at_their_row() {
    let head = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time\n";
    let ok = format!("{head}a,1000,1024,0,0,100,200\n");
    assert_eq!(read_pods(ok.as_bytes(), "p.csv").unwrap().len(), 1);
    // u64::MAX and 10^12 s: refused, naming the column.
    let max = format!("{head}a,1000,1024,0,0,100,200\nb,1000,1024,0,0,{},\n", u64::MAX);
    let e = read_pods(max.as_bytes(), "p.csv").unwrap_err().to_string();
    assert!(e.starts_with("p.csv:3:6 (creation_time): 18446744073709551615 s is past the latest time"), "{e}");
    // 10^12 s alone is within the u64 range and past MAX_TIME_S.
    let far = format!("{head}a,1000,1024,0,0,100,1000000000000\n");
    let e = read_pods(far.as_bytes(), "p.csv").unwrap_err().to_string();
    assert!(e.starts_with("p.csv:2:7 (deletion_time):"), "{e}");
    // A pod deleted before it was created; deleted as it was created is
    // fine (openb has such rows).
    let back = format!("{head}a,1000,1024,0,0,100,50\n");
    let e = read_pods(back.as_bytes(), "p.csv").unwrap_err().to_string();
    assert_eq!(e, "p.csv:2:7 (deletion_time): 50 s is before the pod's creation (100 s)");
    assert_eq!(read_pods(format!("{head}a,1000,1024,0,0,100,100\n").as_bytes(), "p.csv").unwrap().len(), 1);
    // Unix times are fine; one row years after the rest is not.
    let unix = format!("{head}a,1000,1024,0,0,1700000000,1700003600\nb,1000,1024,0,0,1700000100,\n");
    assert_eq!(read_pods(unix.as_bytes(), "p.csv").unwrap().len(), 2);
    let late = format!("{head}a,1000,1024,0,0,1700000000,\nb,1000,1024,0,0,1900000000,\n");
    let e = read_pods(late.as_bytes(), "p.csv").unwrap_err().to_string();
    assert!(e.starts_with("p.csv:3:6 (creation_time):") && e.contains("at most 1464 days"), "{e}");
}

#[test]
fn a_line_past_the_cap_is_refused_with_its_number() {
    let dir = std::env::temp_dir().join(format!("tessera-trace-line-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("p.csv");
    let long = "x".repeat(70 << 10);
    std::fs::write(&f, format!("name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1,1,0,0\n{long},1,1,0,0\n")).unwrap();
    let r = tessera_input::file::open(&f, tessera_input::Limit::TRACE).unwrap();
    let e = read_pods(r, "p.csv").unwrap_err().to_string();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(e, "p.csv:3: a line longer than 65536 bytes");
}
