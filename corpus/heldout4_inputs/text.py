"""Deterministic, numpy-only builders of the fourth held-out set's text inputs (credsweeper, pythainlp). Each
feeds its model as the package does; what only the package can compute (credsweeper's 529 hand-made features, the
thai2rom encoder's fp32 outputs) was computed once with the package and is written here as literals.

    python corpus/make_heldout4_inputs.py   # writes them to corpus/inputs/
"""

import base64
import zlib

import numpy as np

# ---------------------------------------------------------------- credsweeper
# credsweeper==1.19.5, credsweeper/ml_model/ml_validator.py: char dict = {"\x00": 0, "\x01": 1} + sorted(char_set)
# from ml_config.json, one-hot encoding; line -> strip(), 128 (=2*ML_HUNK) rows; variable/value -> strip()[:64],
# 64 rows.
_CS_CHAR_SET = (
    '\x1b\t\n\r !"#$%&\'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~'
)
# (line, value_start, variable, value) of the three candidates CredSweeper found in a small Python file
# (Password rule x2, JSON Web Token rule); captured from credsweeper's own scan of that file. The JWT candidate has
# no variable itself; get_group_features takes the first non-empty one of its line group ('auth_token').
_CS_CANDIDATES = [
    ('password = "changeme"', 12, 'password', 'changeme'),
    ('db_pass = "P@ssw0rd123"', 11, 'db_pass', 'P@ssw0rd123'),
    ('auth_token = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.abc123def456"', 14, 'auth_token',
     'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.abc123def456'),
]
# 529 features per candidate (RuleSeverity, entropy, lengths, regex hits, file-type, rule one-hot, ...), as
# MlValidator.extract_features computed them; listed sparsely as {index: value}, every other feature is 0.
_CS_FEATURES = [
    {0: 0.75, 1: 0.9268624186515808, 2: 0.9166666865348816, 3: 0.8926906585693359, 10: 1.0, 11: 1.0, 12: 1.0, 13:
     1.0, 14: 1.0, 15: 1.0, 16: 1.0, 17: 1.0, 18: 0.16279069767441862, 19: 0.12307692307692308, 20:
     0.12307692307692308, 21: -1.0, 22: -1.0, 23: -1.0, 24: -1.0, 25: -1.0, 26: -1.0, 27: -1.0, 28: -1.0, 29: -1.0,
     30: -1.0, 31: -1.0, 32: -1.0, 33: -1.0, 34: -1.0, 35: -1.0, 36: -1.0, 37: -1.0, 38: -1.0, 86: 1.0, 97: 1.0, 133:
     1.0, 210: 1.0, 239: 1.0, 329: 1.0, 340: 0.75, 341: -1.0, 342: -1.0, 460: 1.0, 523: 1.0},
    {0: 0.75, 1: 0.9543569087982178, 2: 0.9474427700042725, 3: 0.9303330183029175, 16: 1.0, 17: 1.0, 18:
     0.17829457364341086, 19: 0.1076923076923077, 20: 0.16923076923076924, 21: -1.0, 22: -1.0, 23: -1.0, 24: -1.0,
     25: -1.0, 26: -1.0, 27: -1.0, 28: -1.0, 29: -1.0, 30: -1.0, 31: -1.0, 32: -1.0, 33: -1.0, 34: -1.0, 35: -1.0,
     36: -1.0, 37: -1.0, 38: -1.0, 86: 1.0, 118: 1.0, 210: 1.0, 239: 1.0, 329: 1.0, 341: -1.0, 342: -1.0, 460: 1.0,
     523: 1.0},
    {0: 0.5, 1: 0.8369725346565247, 2: 0.8156195878982544, 3: 0.7720808982849121, 16: 1.0, 17: 1.0, 18:
     0.5271317829457365, 20: 0.8153846153846154, 21: -1.0, 22: -1.0, 23: -1.0, 24: -1.0, 25: -1.0, 26: -1.0, 27:
     -1.0, 28: -1.0, 29: -1.0, 30: -1.0, 31: -1.0, 32: -1.0, 33: -1.0, 34: -1.0, 35: -1.0, 36: -1.0, 37: -1.0, 38:
     -1.0, 116: 1.0, 118: 1.0, 128: 1.0, 239: 1.0, 329: 1.0, 340: 0.05660377358490566, 341: -1.0, 342: -1.0, 460:
     1.0, 514: 1.0, 527: 1.0},
]


def _cs_encode(text, limit):
    char_dict = {"\x00": 0, "\x01": 1}
    char_dict.update({c: i for i, c in enumerate(sorted(set(_CS_CHAR_SET)), start=2)})
    out = np.zeros((limit, len(char_dict)), dtype=np.float32)
    for i, c in enumerate(text[:limit]):
        out[i, char_dict.get(c, 1)] = 1.0
    return out


def build_credsweeper_weak_passwords_batch3():
    lines, variables, values, feats = [], [], [], []
    for (line, _pos, variable, value), sp in zip(_CS_CANDIDATES, _CS_FEATURES, strict=True):
        lines.append(_cs_encode(line.strip(), 128))  # lines are < 128 chars, so no subtext() window
        variables.append(_cs_encode(variable.strip()[:64], 64))
        values.append(_cs_encode(value.strip()[:64], 64))
        f = np.zeros(529, dtype=np.float64)
        for k, v in sp.items():
            f[k] = v
        feats.append(f)
    return {
        "line_input": np.stack(lines).astype(np.float32),
        "variable_input": np.stack(variables).astype(np.float32),
        "value_input": np.stack(values).astype(np.float32),
        "feature_input": np.stack(feats).astype(np.float32),
    }


# ------------------------------------------------------------------ pythainlp
# pythainlp==5.4.0, pythainlp/transliterate/thai2rom_onnx.py: romanize("กรุงเทพมหานคร").
# char ids via thai2rom_loader_onnx.json char_to_ix, + <end>=3.
_THAI2ROM_BANGKOK_IDS = [4, 13, 32, 6, 25, 10, 7, 26, 11, 12, 9, 39, 13, 3]
# Encoder outputs (1, 14, 256) and its two final hidden halves concatenated to (1, 1, 256), as
# Seq2Seq_ONNX.run computes them from thai2rom_encoder.onnx in fp32; stored as zlib-compressed float32 bytes.
_THAI2ROM_BANGKOK_ENC_OUT = (
    "eNoVl3c8l98bxu2ZUGTLDqGSjM/znHNEg5CkaIq+FWlKNIyPhgjR0qBFEk1lf57nnCMNqewQSstoKm2j/Pz+e/44537dzznnuq73"
    "nb51HvEtLiTRA6FkPxtC0mRt2W1FQi5Hmof9/wXBt2k3QER4Ee5V2MxXL8C4kD4A/aF6dP63Xiz8mc9KB6sJ/nrNwNcmPuX1N0iw"
    "qw33wiTHdVD7xAYgZikNN3l4kiifs3Bc3RaQlZ6JjwRJoVeFH+FPoM0/9mzhvV/ZgCgXE7h+kjqKeWGEJZ7ZsRc4ETBuzoDiqafY"
    "zlU3sduF9eCUTSOo7k0CNoWXYcetVuL6rYL0no4kOf4HwKKfVqjKM58UzruNSySlYWxHPPCcVg43zDsJTs0pwAMWN8Htlc1kmlMq"
    "kPp1iGXX6aPEu1NoUGAivtLuDEvE/mC04w3j61FBatKjYe9VX7Iiph9aNFlAx4fNxNROFR3LOAvnplsRHcNZoGX+b9yRkoB7lj/m"
    "57s2sq762qDqlRi7034BHtCzoqliD+C4tr9sRMV8fuCABFmaoUH2qRpSAjrJJZU3XPFMb+y5+QZ/fc93zmNcHusws4LPHzMORS1s"
    "IL4aoUQ+/isRd/6JZ9eI43rrHSD1sgH5kvoNa1l8wOnPMmHjsAeodJyC1e/3weNKVVj3nwHYl61BF26MhCPVR3CchQ97KToLS2Zr"
    "QquNB8lPvb0g+5AckL6vyo+cFseHundzn75tAInGUsgq14KtfVLHlvATyMSYfHib08OryjqBYJkH2d23HfNhsdT001HgElLEau9W"
    "wc1LY1mFMiM4Nv0SSK+R4639Z6Jzg7+gw96rZLujOlx0Sp3PWTsb3x6yoRMO5ot271JEVTZpfGtlPRZ8ySTZq0fg/Ndn8LWCTUjp"
    "zU5aoCaGRmaGotjabajgm5DOlAuBNtVCsNbNAMwKr8MuQpbvOnOLO2H1Eu8uvgzW34pkr85WZJdkiFi5Z85Ut92DTHvpBT8c1OT1"
    "UndSKb/dJHgeQueTBFR/VgH23Mixeob2qCy3EysEDpG61dn4WnQJ4QcQzGUnwOLCeGL+9yq5d+4B23p1JrUq3oFlr1hTxSxXNMtd"
    "hVwK3sS7z3JBX04lApO3h/GLA03E4sZzXNczQ/TCIpMrC9WAkWmaYIIxYl96JsEppd1kOEkVrdC9Sl7LxcAwg+v8rrV5+HFvNJKr"
    "/g2/D0uSY1na6H6aCaqIsKRvSr1oupkDWMUK0L3+BOZkpg274rMX7WcSSaGWLnry/Cde6LkZ67eFkULhS97ntgx75Jk8cLr9gCn7"
    "5QLE5YSsC5gNVW558neMlEhY8ESgL1vKeKWX8johyey8hYNlfsufcQtSpamsYRANmv0dulycCFfsd8EPfkWQA+dlSHRip9PtR4Hk"
    "xpkz3PwPLuTZ6J2U9SvS8eGdROUkA78UrOdVjP/DBg9dqd9CTzA25Qoh2Za4xMmZHTh+mCm90so8+RzHq2ws4iK/y6KkxcFgwtIM"
    "ZsiNB2ucvEBxaBPUTl4BxxTmkJTe80BRKhCtOqaMBEFz4cJEW94+MAeb60bC0/l1/NCjAeb5u1pA/mpD51trmaOXZ/KGvkYCm4Wx"
    "nF2SPHtEv1YgULKCO1THok6LgyS2U4ntHnaFZz+tJzKrzon+1W4g+yQU8aZEe5Qrmcy//LCMfzP7JNlnNIn6rhVQ50dLyEb5kyBo"
    "03XyxvIct/r5e2bZ1Ew+51EFbhYpoBeeJ6BKK6DJ3yaINHTmoNae5UBfYyqcEzgHptQPEHRFl759KU6/BsrwWW7mzMHpNuyPsa74"
    "1GVLSnrU0cKjn8jyhhqn0ucJ7BliDzTHXuMdTbrJI/u14OVcT9wTYSHo6NuNte3i2Mrtr53ug/1sVbgF/zt5JdpqdJdEZ+mhfz6S"
    "cOWcZsGaL2f5/wzelbuOFQMPfy+m925oIee7LFr/IE5UJG4I3r8WiJZNdQMF01gkfbmDTJ4ZzGhHMDDy6UXWIt0KWz5JwHd1xNHD"
    "4gf4g0I6+54fD64ZewlA6gVWyUGBXZ89htGfeQ7cqzkMUtrvk6htF8E2tVJ+3aZg9tOUfPLu2Dx+Zb2QVubq0UAlnuiE3sX+XgY4"
    "aLo1tHoQCb8fjBLQ8iQy5pA0yvp0j7g/aiM7y4rKxyg4w+lOl6H4+hg+NU4btc9B/L1Zi0jbRQ16p2wN3ICl2HtiM9Hhte5UfWgh"
    "NDqxDqXJhiPrdiFd3qWCHXf6QXHjx0B+nyxRTz0Aq6Ja+Wu5LWRt8m62PH88q1rfwb/ZmgI+jpWBN96lkth6A+jTchU2+ERTzZAa"
    "5vvPMhiTshUGewWAo40x8FbpFXKqx5x6LlFDlcMN/Or8I6JZNX3MtyRH6H1Ri64tc6Axp06Cxg8dYJDpxSppB0Hsx4koOr+a838g"
    "4G0+XySb7Yxhi78MnaViRn/pSdI92WXctM3nyc9NKdChYxhMzROH4dt+swWbf5KijXmQiZ4Hviq5oNJBcxgMZ5IZM4SoduQYH/e2"
    "hih93EOwkQO6I7OFfTlNjq6afgDG7N9FhGFLwL3AE6BY4EnzShzIR0lE99pEEBUzDlqM4cmH4FP80ORc3BfuAaJPtLKWk6Lguolu"
    "7BquBToeSsTow1XycJs4KH9qCunJGFy6uUJEm7K4YEG3SOLXA/D6XiQFRuVk/Lc0GPLTgqw4fI6r6DuKp55rcky5WEQmoh7u6IUq"
    "sr7tPBDXewyP5iaISmvsIbrrzcUdioMTs6rZPXPD2LtuIlIbrgriLsQzH6sol1TZL/hPrUY09k8YttaeDc+d/cs2XhAjY6W1Yfr1"
    "StF4h8OA9ZXFVxTaybbV6nz0qftA/ov96Js9A/Q215SlRiXgm9vvg/GWEtTqzHjunkMwkDxNQOLVLuZDl6oINV4r/3itkj9n9Yl9"
    "Ih8PrAP9QcZiHdaoW5n+DE4TuCBVMkPtBR40syt9zLgR7xRFqiQvjwQj8dztb4GigQVzqW60Kb2uJcHKMv/RRo8mIvtIHK1tduRF"
    "0/vLB91eQOOao/yzzFPMgXITNGLWSNQiPpe3oV+w1tODbD7+BKT4xkHNizaYLWCp0b9a0nPgDl9tMad8kcp+dt0KeVB4dQzSXiiO"
    "9FtVUUGxBX3l5UNSosaS5nhXfsFHJeJaXAYWrm7FWFmLfTnjSPm7S/Ls+fSl3AzrRsFFGxXCxIrIu8QQ0dCdDnh3QRDqrJRlrG/l"
    "chX7ZgpCpmkxuEGFOr9Zhe5d/A41xX+VytLPTpdN15T/k9RDMQf/wf6UlzB6mkH584F5MJ7mgHVqivyRlcWkoHSyYLNBK5mjux/4"
    "f9lB5riWCLQ7jjGborUEc+rcStF4TdRl0wXheSFh3DOAFPcMH6/2ZVU9NsGjAeZU5oqQ3jhdD/ecUKYFRltx/fhgztdtMk2NHCKx"
    "Cbvw6fsqyC2rFSoZ3iSFD0R45d9MMu/hLgirxIBK6hGyzkYTOUik8XBJNlnWXUVqPByR9acfwBw5otQoNyoZKIcDJv2HwlM3ooUF"
    "QlpXJuIslKfA9hWzYMCOk0Tmri1MCuric8MfkL6CseBKbAL4vNEdjguaBV40bQRrHAeJ8kED6F1LYOQsIU2IHyDGG+TI4exvbP8n"
    "fZy+7wbUG/MaBxxeyZ8yt0O2/or8yn813Pfzyczc4nMEZIjTkoJSPLVuBPz8PgF6qq8lJcrPYJe7KyvxSYaEt2XguSdjYGfSbqh9"
    "eiZ9KKhl02oPwiyHKC7YUQ/s36XA38i2wMOfgkHW7SUktxCh+j134IBXEXtUHaByk6cgFU1GAweEqHTtJaZ/pwMX/0GJqlnWsN/z"
    "ZeHv8fugwxlJlDUliGt7UQpHBgfA7PvJZIGxIokIdaJJD6rYsr/OMMbqEkbxE3lF3/Pkkc48ftaTseCUhApd5rWVyXa7TeRjqnBW"
    "/R7SFn0RKsz3gsndZviMqjXOdBrm2/TV+Rn6GC+YH0k1wg2I/dUAOBeeZDuuNJCU/37g5b1TnUL4xVg9sJ0zaYrC3du2otcRqmhq"
    "9Ul2QE4X/mu7IOhOSSC+ghjQ2biKaI4cweGdeTAPdTDG8Yv5vMlRbM6f4+UNZZJ0iZc5vLeSodMs7WhMYgNQLUsRLKovY/jGdTBE"
    "v4kM/ynm9V67gBPds5CygT0cG7GRL5A9QP5G+oKfCbUwpnqNk2PIL2Dc+Bw6xUWyi+9PZDL+iPMv75qy63uGGGTpCxvajrCVn61B"
    "9q+zxGnpYvaWpB0t+WOF1y2hrN7Ug+Th3dP4jIiFY2578x9e+bEVV8JooPsTAkuLybXADbQnEtK+K6vRKa/jELo5lD9ZHoI+qzBM"
    "xIpobGH2gKn6q4JX/g4tj1ErA4+U+/gvDYvB2o/jwHTfa/y25KVkXYYiyhm/Hh7dXyYYO2JNw7bJorbfRmRTRzlMfs2iOrWttL7E"
    "jCpYmVB3udWOF7cb0lOe31jL+6H8g7wX3Cp8FSxx1SIlbBy/pXy/wDF/L5QxagYLWqoc+y73gF+dO9GkcknmW64FZmpiBG9DvzNF"
    "KcOk6HoQsokrBIf1ljAXFsWzDm8Gy/xPeMHZuyugw6mVaOmFneV2PR5Q4oMC3Do/lNmmEACozGHufPJB8mK4HvQ5uoIxqm4iRbup"
    "aM2QJg+uqpQ9v3kcip25iCdVj4U6c9PZ6DPr+MR98lxq9nd2nMFv0fxhIXX+xSAzxwVgePAhWWH4mUv2dEb77CcjY/2XXGn9CXjp"
    "yxu4ETeQrLQbsEZ/I55dHAwrfqvAD7ceA5Q9DXXedRBJTIacd/oYevu2CroOLUiBlAu9emUpVRHKsFvd/FHHzjDkj4XUT2UhuXGU"
    "hxn1FL6c4k1idqSwE72EzJJDY6loSiYUqTzE34Sl7PUj0eDb/SM46DukW1o0+ZifvdixPpaGFeuhNaEmKF9hPsiR00Brxh9lXV8o"
    "w6mX+2Ffii5aL/uGn36pkPscPJnzHLRFGXlrsemHGWioWhdFVxqgFgNpkprG84Gv9OmOCSEiJvskOTuOoXqk2cmuIQzX7Mvj9892"
    "Rhv/0PKLAwv4X9PlkbKQcdqUcpTNDMkk6DdAz19IQbTxTTlockP7utpZnWMz0dCo/o2mVMCVBpXMmMEpeOouZZq784YjaLSF80rt"
    "iKleP0xyPwum6qqTCb36VG87IeWB2ayd1SK8J6sWPOqegM9sU8MZ5gfJPL1BJuhmDSMh6YScj31na2N1qJfQlLfasAEbq5+Edn+n"
    "gKmDvfwjo5dAfoglWszncotdhnRm10aqPFzHh062RaX/muGr3Hj2laondmw7wu/Z/YC4PakWMYaniZR7KyuSDUA6so3c/OQO5hXO"
    "Z1pmZZJlZz4JSr096QVxF+S90xtFPi9kgk2DcfMNjbKNvbmlwn+JxAFR9pzLUnruwFYqXH8RXPaX4ormyMB26fd4WK2BjDz+yIw5"
    "s4LJf+yIPvP/oLjpUxE85gK1IhyBv80UyPnYcg3LzoJn85dA3eu/2LzmqyK72KesBCcJe4S7WXNJSfREeBq0KmZw/icxUTT+za6x"
    "DaPDoer40U1luHo/wB4xh/BhLMn6bxnho/+eAo6ThNT8w2ZsmuDDtZ3dTdXTt9HIml0oSHk6OtrWX75rSTRyX/BQ4Ds4mb+524Vq"
    "S+zh2/6xXMFNF/YqAPSHszOwVm4Fbqll3OzJTTjbVYteCzwAnd1mCnLUHGh1KUCWbxoBM8EPpBz1QwmasTRHIYiOOb6QfhFYsft2"
    "5JPylYCq57L8BPOjjO0aJfZjSBmZtEITf9fb6OiUI4KuwNp+reYTrrfJiZ0ZI0Qnutcy5xTX8S33jUV7ryixu2dW8txkN6RdPwlc"
    "fpfHyD6cBFj3Tw5uUXvhtX+5YKrkduTX/MehdKMFvH9QAUb0ZIGwpabw69eacv29m7HTlTPgIqfJyhzay438zQHmtyXB1wiV8p7E"
    "IITkg/Dlm3PY6rJMeCDOlNx17GGdjN+Dlgg5PuCukM4LlUUP+EJm8LoUOWlUW/arTwYNnnECZu/aeZkeU+SqJ0msfCeRWa7jaEZz"
    "OPZK2AT/Gj6Dzrlb8HdFc7RwS4soTuoqO/GoM80Kt6QDeWPw7qQlaFFeBL2y1q/8eZ0vKlfxRjL5QuohbU9EQlVoKFkI0q6vwQM7"
    "3PD8w+LQb/wJ9o72LbZabCUUvtAEZoMJwHVkGnXR78Wyrit4m4da1DRhJ9UKSiESl/1R5fZK8KejgK/edoLdXD/qCYv3kWhkh5yH"
    "DmIf7pNT7haKTz91hKdGXpKHZTMQLpVH3sFT0cl/WfyWqgM4NK+Q9Nw/jXtfRhDLExFoX/Zutj5gKno3okAt9DbS4qblog5F53LY"
    "l4M70uQYO2ltdnr7aqDkvgmaKFeDi205eE6qDgpSWM9Gr3tD9C5FIc3MMZCxF3H/XnSSZzOn0bpGLe5tyBbq96oUSt+chBzSbrL7"
    "lr0hFxtmEdlKI3pYfiaKsK7CNccXkylh6aKbXiZg8bUK0P31r6D2S77jLVEa8VYQB7ba/YzwXDNzMMuY2veMReuWPoHJ004Bq01n"
    "od7wTdGqX+PLH8WHkoNBS+jU/mlUIJcCvP4cZbmeHm5Noh++c2g7J7tzK11gLYe5pjyi1TWBDcnagRKazdnQpRFQ/oYS09A5BVvE"
    "lfDrErdS24BRxhmaiXb8CGXek/04c36F08KV97kx1YN415JSuEd/B7WwjqLjtruzaXw3l++RCTslr5OGS2VkS6QpNhqpY17KW6PB"
    "jRy0vNjJe903RyNxPWzxomOwysmG8T+3Buo52yB//c+MRM8IjvmO8dPieih8m8gOlC9BH20c4Y+pXrjsiw+ZX6HCF6TG0P/u2OBV"
    "eo9gjK4J0V51kt+cbkYOf4tj6nYrArGWWJrZzuFxJf78ZuFKumRMDM09FYuaizYiQWS80yM46s25ck6V4pnkfJMAnl5zj1u9Zw6Y"
    "pKDKPs42ofU7P7J6g5lsWJo7/at7FUcYrCMJ0SEwtlNdoDx/NCyQBgqcFUbaVpiArJRdqCpNSJU0d9KM/O20TSqNfe/fTlLXzqPp"
    "L+X5E241nO2/3Sxz9RPJb1LAocvl2VztbFire8WxXmYyVSooYc+/EiLX98cZlb4WKFWUIgo230O6n1hTtMYf3RLdYLXOVvOWlnls"
    "l8SFsplnRWC4CrDSMBY5f/dhX+QqQIuGSVCYOh7tUt4LhzobObLkAq690MjKJ+0kCuoN/OB1BWh1yQOY+DkLLkZth4Zzf/C0UYv1"
    "iZWBzTvFcFujDxv0xQQK1+lxFS+EdMO3v/D3VCVW3CkLD8dtAC/RR7g1KhpsG1AjLe4TUXrfYWJxFpKyVis6q+4l1gtIg1AwHg1y"
    "d9h7zr+gyGGIm2dnh+WaJWl8Sy4s/m8MLX+/GNW9iKZ1536y9396oL3XZ6FFl4Q0d8dffrgXwdXTtOHpaGeyudJGlEp1uCkhA2T1"
    "AsgPumYzh24msaU/a9i29S5Ur9acuJbJg5eH4kjopRh6/2k1afReNOppR6B3TCuTmKzCms02RK3S5/DXdSMwNEoCmDrXgONHsvCA"
    "rCK61GwClz23QLqO9fDBCR3Ur3YB7+pqwy/0L5PGpgk4Iq0X96+djZQHhPjna0tkWzAOLbI5g01qnwjqPz7DM+qz+ONx6xgVkyTw"
    "09odvolRhodzI0FqfDqeMX8iOvFYH35YZU7VNsWiYNsM2JOujcstlmOpF19Il9EAlpuoR2viJRH/ZjJaYwTRgTVx5Pj19/Dc3Hvk"
    "YogdKlrkSzzsQkm7tDYpAaWgf48PdvtmCEnyen7395/49Tg1kOWQymceMsALDqdin7tV8MsZIVz0fApWV3/MBj/S5H+8GidKg4tI"
    "ysVA+kRVlj5cmwQ8dFL5CxbSTMI3f8zml4m27q0kzQpBIsnt9kT1mzl45S5E/1mfZD6lGoPluVKsr9E7bvvOJ7x3dwx99ewfTDy2"
    "DX39+8zptUwqrhRTFpV0u4kCF5iS4tkWSLIwiiIlIV19fAwTtvQatyLqDPQr/wGml10jV4P34IwRMWb2KWO05IQbCDfu4L5bBaAz"
    "fRxTOrEQ5uhYsKpCBtqCmfBogw9T3nqArderxQmVOui51h523ZsYOPaSH1QK0eVCCk1xqpgaJllCetdoDMaf9dGymSokwE+Pi9g8"
    "D8eurmPSNPL5ucVCqu8fx7fYbuE9tppQ2Xgh3VEjRLtwNHr14IGTRZMQVcuola/KXcx7HZ+LXJb6cU36FuDRtAmsPBvMb7Xdyozt"
    "FTKbCodJA1xI19S0QJUWXXDIucExNNwKmH8ehww9z+GA6kr2qboQMf1CejM+lnYZxdD2lz1s0dII8mTXPPqpRYU7GaAKZy+YBNaq"
    "aFHjNTpYefdNZmTJazD3J+/4tS0Vx/UZMBeGhOi0nTZjztiizsP6XEPVGzKwPpcoVC5HB5qF7BWZTLw61B0UXdYVPFuRBH4/2cUu"
    "qBCixxrv2P6V40jAgrlQ8fRqdOmOLhK7Icm/WSuGDZW1wfpDddhXdS4OnSIPn76Ywwzcve5YlNEOfeY+55eal/E2lrPg379HePVu"
    "WeBjyMOmQ+vJmlFNOkrbo2tPS8BesxJiLbsdWMtMJh4b7aHRpgNYUWImlXj7lWQzsiRiegA+dv8UubtDA66008DXv2qAw+Qq7KCT"
    "+BKpg6Sv8gKZ8lFAkw6Z0OGZLDK8sZva1u5lSvIdERuqjCYtjqWF84VA3McM3oybDt9cSiRlUmPJnawKp3CrreTxx24weMubt7g8"
    "A1wLGgsebJ1MQpy2wdlpO/A4a1k89DOKlmyaRoe4dri6EOCAT/Xs1t1FzExJJWpg/wScILro34H9zMQjIpLlbIT/s1RHFnKG0CLN"
    "COWt2Q79xnJwvLEEFvDioOasNB2WHCLjxcaR7rJpqKvoHf/l0TxkJLgKU4te4jsNnU4TbiuRnv42kEVcGN+cJWycfQAofeKMlpSZ"
    "wJy6i6Kkhbro6pXLoOSfL5V3ikGXIyPJyu4InPlVgjRunguDZB6z752X4LEWZmhKgjXZVSyNXO1zSOrr29B5znuidfYM/ihQwc1X"
    "E/EpC3sSdCsWmPnfBCVLjOCqr7PxhbM2eLmCH9v15y5ILN2A7111xfoytZAk1UGfl594r4WlbLJ+FFYP6+C2yWRgu5fLaG5uMNE4"
    "cwp/97nPv955gk/Qms3Yfyzl+0e2k4jKR9xW/Qxso7MI9Y1mkHg8Ffwt8EEvHK6wd7MU8Y5+JTbLWEg3jmZMTcN2FHp7Cdc5vhzH"
    "R/bwEaYLy/NuW9Fk0yvwcZ6QVpYKaXarDpNtuozltouAamoLnG+rT6a80MPfVZYzgSIdtCq1GD6fN5u/tzcU5WvdZvwVj8O8nDns"
    "zz2msCRPHv7cEcx1zrGE8vvESaOVFzrte5z9ljUW3R/ZA5rE2kQx/Qfx+46HZB8/mrc6g/wan3WoU9oDe2zQ5bqiObxG2xdcmb4f"
    "JlwWUtwmx+8/cJnLXyFHsx4LqUSfEDWUxiLPFDVB1jchmh0aKihZqMHX1h+CguwETrl5L9ieOJHd7rCVe8ydZfI+7GPGJqeThcsA"
    "WS8/Du39ZA29Kw8KbKTswFyLvVBDvYcorlUA24gQvfsppE2ThVTsciyNCLsO1u3bQ774u5NMpRuiZz4Qpvc7woUK6+neWQArhRxn"
    "whQukcLSQqcdg9+chM/jufm/hKjv6yzBKu9J6LXfeZylbUwdm7+S5htfYYmqMbNyZQJZ53uOpCVNZzrKNaB7pjFo/ypEh9SkYZjc"
    "ef5h6nb4tXE9Wqj7B3YWxXN08iB/8FAF+yvXgh1a3EB+xbhDrSBZLtK/QPBB5QPb32jKbyo4CY6WuMN53/dy/JbrwPrTO9Zv61z+"
    "x6h36plIImhxCTD7dWnv3CHmfNQ8tO71EDTOUuKdzSzo33dqNGpCMq4nx0jbJil6J8OB5ETn4zSvJFbvsQhyoZf45o0WXLikPyl4"
    "rwe17k6Dwa8caE76WnrR14xVHzMWncy/Cnc8jqZiqg3sieRwWG5rCoNwDc55v4rMa5jLqMtrk7ajSXBH6Bvu1K5Qxjm2k10QLc0a"
    "dzijG6FziFr1Tb7pwibq0huFZ+S6IutoS1z9+xm2UlED6tc6SZNRI3DueAJDNG5wr68vxouQH3fwjzIC19rh+1WLyZVwCSJe85f9"
    "LTfCv9M8wPYrCuiFW3Pxi5Wz6KtGB3qWevDJd1xGuXcX6XlrSG8VXyt/2HyMW3MjDup0ujF3gveyw4ESQB3egEot1vDCnJuiB8Vi"
    "6OJJVVSj7ERnBEahZvMpaPPjHPJd+hA/5vcZZm/YInzQfQEQW32B1DrypIsdYu0yrnDFnR50bsQV8vFmPX/v2w9ywX0S0/UiHB8y"
    "egg05iSwvgOD4KD6FXa9JoDFa7qYfK+jpGqCImYsLmE7txo24LcV+1lwny+1KGS6cypxmMojbnGWDjW65U6/lB3DCh0GNH0nJX+U"
    "raB09zHmli+Lxd4Pk9qts3GjQTfxHpcG3o3qA9FCpulfEjsheAxwveDHD9ZtFyx+KaT/9tiT8MQY1NaazEvZPcZqYrKkwCe/fEL4"
    "NKr11BBmno+mKh+E9HZLPnPs5C3WSV4CrvL5CB0XyBPf++8F0rsvCK6MV0KTwu7Bxl1J/JdLu9B0n1Tm9RcE2l2doYl9PtD5Ywu5"
    "xvG49ogMPBSpT/JehSOvxRks+HwRpqn1gL2xSaL7nkY4yHga3fpdSF9MEsMdd3ehqJYZ+H2uIlf25y7/VrsAOBYdgk41oxn27QAn"
    "WoRF8l98KPohpDNGNaZZLEQBxEX0448QaYUmOOGjn8ozTrkhIZDiapcfAiOHnZg/1jFka91mZrpZIvP87n7uTXM8mcjWwZ3PE4Ca"
    "7Q/BuOm+cM6mGtC7XIvK6HUwJ18L0e9/QqpcIaQGo5xxd28TOHLyBvYbO4lW38Gi7xYTodMPK3haI4rmySXjL3viBRXO90lkZ8KM"
    "dI1Ax0eXo7mzI0JU6e/LvmqdhnJcDhPJAB9aY/mGvNlgB3/eVWLaHEpJ4qF+8iLbgam4PxVoPfmPXTEoRAbzZ0GLuuNYZc9B+Gnv"
    "NrR+qw86MeQn6v6YyNeGn+YVZ8tjgckIOdo/D7yVXciXc+cER3T/g2sL41in9SqkfVIxqDQ7h+N/2oHjT7OYnSXjSPv9GFr/voos"
    "HszhrnnJs45bOhxNwGQUYmaBzDee4RpeyaKAxxq0aLEr9pvTxlr2W9Ddb2aQjkCeOEhs46LfpcNK/hvvpVxDHm+Wopc8B3iBwwt4"
    "KF8C9UtvoLJNWfy6Jf1wntwiErIqjEqZyMKRZX0g6cMfML2lFs/XyyXfnokxrlauuFdTF9yqXSFyfryz9GfFGNCyNFbUXJdCQo8W"
    "g4R92Xz03QXUQ9cD/GcQgrzjyrGZsgbR3TgWfv86kVpfSMA/HIzQptLjWNd0LOdVcE4wkGxIBi5MQTGy9uiGzxfcbPic/3joKTfX"
    "ncAPDykp/KJOzjXPIJPc38D/llsD5dl9UKfhDPE8rEfSbgSJJpi+EwneTaYJAUpg0uxKHFcRw458OAcrYxH8/vQTmBa1jDzw7YEf"
    "co4QiX0b0PXHdjSscgmZecwJt2y6i9NlF3CKZ/tIgHYHaXpmRW8FY+bmuJ/YfaI9vTbzAKm1e4jnn1QjXv+5icT3qOBFXBV79tIy"
    "wS2cC/pMWp3WnvOhE8zkmHvjj0GvoGqsYyhOP8MQ9tObZ3BD8XVeNnRItFy/uDxJv0bk9y4NyEtZ0H/XO/n1ztfYXXqK9Mayhzgv"
    "WQEEbsnBNwaDyDOjGby3gzzZEBYCGgeEKKekTXDQUQPJisuBnkwprv3jVvbpoJAmPTGjik5CVLRAFRscqccNzZ9xZJwmo1hwmxT3"
    "asGSC7HUe5SB/12XZFbvcQK9+x/DrTPbuG2Lr+PF6TKgSnq+QHxlAkyLnwSGl/rie6d3oeH2MUzOCkUYnhQHz/Wpk1l7qtlM/2P4"
    "9aYruLzFjyDZKFThfYHd1HANnjwshAUaT8uV/1zgb/SytGK0p5e67/gGjSgknFjMDU1tEv2ZUsG3NHwBXxMToNwDIXWYkMhVeiwT"
    "dXatJ9OHhXTRKGPvG2WcytZ4Vmr0e+eBh+WlO9aV9a9YjuJGnnO/rR4Asex7zNgKT5HnSjlmRDNHMHIgh5iH8HjFqX/sp4Ax4Mnb"
    "60ymhiH7ecBkVP+m8NXFKgEY1aHfqP7vFwmp1rHRueNYB6jY8YGPzTWkXSfzRMRhBtzs4QklxaJpLZOEZZ/Zc+pHAJHa9Hd6hbSq"
    "k9ZZD47+E6Kh1uTyzI0MCu+RoQPVofSk/TF+MGMzfCA/RVC1WokW9yHa72DCzj86D6j5JLIPh4UosmEyamA/cUxoCtQ+FYtmO21A"
    "7Q4TnYxBGrdFXAlLvCckyWiEdBWksEEBv1mie4TZZ+sF+QALtLBjGbZMDIB+tYO874MY+PK6E9y2rZxMFY+iOX0PwM+zxvz14sV8"
    "c+FKkPBKElHOHN14tRRnP+8mlU3DpORyLh9WpQv/7vKmRSc5vPpgL3toUJI3HX8ENibU8/HOr0hNeQWb62yNpN9nwq4GbXSky4K+"
    "PDgNs0H10DYti2iledBTWotYZnYGtFq3FGYyX/HIPhV0wSKbra16gs/e0gEKZ3dzv7d0Czq7pKGBpRTi5Gzpvb5IKLpvAEqX2NF5"
    "0e/AEW0D5NjlSD5F/yS5ZueBi4cOWe++k+97PBZdkDXgE/0N8PqUasbXWYf2zjQH/TXJfNsPjr3LlsMpx4z58KcaSMq3FLo8riCz"
    "xlTwHutWwPPrEZyV4kvDQzNEmzRu4W5jMe4VrGHw9B5YJaosf7hGEWfMKIZG87pJYvxP+EtagRXKTadRie5gvnAMZY0Xo7HPCkR3"
    "dMKJkZiA78rWIUl2z3Ga1TQU1qKPXp8ch8UPqQHeqQpL7bUmX/nTJPDgAfJm4BQ+fHAG2929GQfs+w0UjdRRWu4I2zd2IlyX/I0c"
    "XKsqmJGwAJxLDMYDhfOJw1VNsKC5hLWaNZ29Ns2Z37OjCO+f4MJaCJtAm90wkUgbi+qV7uKyrZYwbpM6PzjlNGBXpXC6IRn4aKEp"
    "cU0cwsel1yO1UU3cAa3MwZehqMfdH4zvs+N7eXXu7lchvacqQSrfxaI7HZcJCmjGd9JGPTI0nTXg7ajBvDrIdArpu9FMHpHlBNPX"
    "roXOXy8D2e0vgN+EAyx8oQk0SBCzzfATdKwRR+kfcvAj1d1oJCdDkP+7EHwYOADd1ySRwI1ScO7cj3i3pzIeEx1DnKuiUNWWC6yX"
    "zXpofMsR/letSgJvBvGDk0Jo8mch3R3zhj+0IxYF3tbnxQKnl+8aCcNvM+bDLRZr4e5VQvpp2ojI9T0WufzTI0dGe5v8W4javguR"
    "0GWEvTeq2WmOD8vPpJqI4oAWrEgScT5VX0HF/a9M89Xb3PuLrQIx6f2Cc0X7yY3d14nfQD0cFgLwTD6dfXhngMs5lweOjoynS3IX"
    "sR2jLDHwS0jPZY56TL2QCoLegURxB7xQfDkemNJQfvqqM5yeswoWagjp4ombsN6CBfzg2ANkw7SWGQP39pTWGczjQ0Z7Oy1rjxfe"
    "c0Nl6r502fmddHrPfXD4kiP8dV9PgDZOo97fNlKdfC921eQk9rynDMgb1f+Lz5ZIMmyUNwSZ0NpdiJpnLUZrf9iJ8IYy7rZrNH4c"
    "uQzEvpxN13nPgAee1XFek6qZE8dvgBllZ3CxtT20uWYMRwOBUz6SzWeF/WN77fN48eHt1PGwDFw6PZ8kGJzBhQZD7LJt/dCpUAq5"
    "3HmFd4mdIAGLRwj8dZx9cfw2/DG8gY73jSNvFf4jTU2potbeW8DdL4r7cfMGjkmcSGetWw/ffDuKjU0Z2m7IkRKFEhBqth9bJU2m"
    "13rsqbysCRkf+Auev3EAximNxztzdeGd7G3swicV+FVsLJygcopfHi4mAo2Z8KSxA47YNZHqi7TgLHJPkDQ7EC8RV6esA4Oyv5pT"
    "oeZBaLjoFogY2ME+K7Ena21fwSFpGW54sRluNt3DbCBW6I7ncXanqT0+6focDl/3Iw87k3hHkyJsC0qgyUc//r2iN3H4zlBJhQDO"
    "UnEerr9tQX6HTaHZn1iGW/Cee+GojGJHIpiwd66g64Q5ivV8S8T1OXj96QHeotqU3k4YAW6sHfXZMBm98RfC9c8glfF7ya8+/JcU"
    "PZ3BfijsgD61asS8g4GqH6bAvX1tfK2aHHUufI4/uV8g4zJNaeEuW3BP4yie2nQALi7KJj8f9DLHF9Qyk497ofPzWziv/yK59hOB"
    "+LaMGa5z92bsgv+wRxa95p0DrnNOu7SJ7u8SFub0E1OnsWRD4wAuyXhLql98hRdMvbHPXRfwRn4cyZxjRQcNzhPnyhryI+AwODCq"
    "Dc2/42BH4X+s2cMO8Lzqgkjtlia3fDQ7m9jTeKeLEC3SbCTKYc14q/ozElXmwO6wmErl3e+DrmYh1RkanX/FLwrqa3OgupII3D7U"
    "BFusb7HFOXXgmUSeQEY1BS7X64PmH67hizKxaI+1HJMmn8p2m6xEugEt5NPcBXDTc32SsNIDL/6VROy7o5D8vOvsUesW+OVOH/j9"
    "ej8fJ27EyW/eRl1GhPR36Uf+h5IQye2Rw2JiqiJj2R+cR+xa2E/Pg3//n1levxRN+G0oihtKJHmj6+/9FSLJUa2aTVkDZozy9pPp"
    "bLnlFTtu0RBEYnlN5fH3FJCYyRGB8yNtuum+EiN2aqfTsrsm/Ot4TKQazkDzy9OA/oxq1i5fmudEI+zh+YrUPvEIUzRaq280/71H"
    "PengbyHtejUAYrXkeb8n9vTfJjHRtjVuUKp5BbxaIKSR2tsxnNfMieXnEan0M07XUlVE/SlF3P3RGuW+A9jp1hqkdWA7jdSMoXS1"
    "HxY7tJ39u+qKk7g/oGq9O+gcOBc4cyvZOAMNJnF0TxFZis4YbsXOmoWwdVkMKkiNQLv6Por+HEnlF16xIE+vvGRzwwPprmvjYbPY"
    "RNbbxZ5tXTgDthxOE7l1nOGXcG1wHNfBGywodlIu7CLmXcexiV0glZ5rBocK1LDHlhXMYT8NtF9uBPJ/r8LtpybxDz5Yo+fCJLLt"
    "kT/rMbQAvjYPolOm7CenBafIyaSbTkNB3WW6Cmr4VvJmGnvFl3w7ZoaGUlLw1ygP1N4zqlHbjbzfjwvkWDaiW64LYaX0BWhBb0L/"
    "VlkQJp6JLbQcgH9dlkA3OQY/UFwIpLpWcfcyI8qPn5+C1oTbUHmf96RkRgQMWr+U3yZzCZ7q86bzDQNR4QZAf4Y1wWHDWqAzxg5t"
    "jloLUhNtUZGEJRcl2UvKH0hDdoMZmzLFB+7J1kWe/VfgihhIT4XqcVOtjel3p3bYmqJPAyNV8QT5ieip0xzm5qsy+CYmA487rItv"
    "uRowssx8PGVAn3T+DQYtL+bgnuGpfKW3K83JXohqbiaRvV7T4U8bE4HdBGV6mAbAkWsWNPLcFDpN/BnG3+Yhk/9u8Lft7OmXz1PR"
    "N4VJaPwXF2Ac20ReI0Va21fKC6XfQ/eqHcAgTRk5Sz/nFfty2WtV87jmBBOwwvMQO5QpAYtaJfm773KguWYyb1mzmMQVX+Mjai3h"
    "t99Z/OytdvDZtjt8ccktKNkyDogfmowNJwiJqXUT459+mzypNRNtnLEY3DNr50MNfMnTsHj+qcEg7rqkDQdHGfTqopVgqNkFKY83"
    "hEO9B8obZA7yy/4K6YnVPXjzHSFKCdenhwObMdo8RNBgPDvD9yJJYN9C51HeDhhdJ/bQwmnH+27YQZLhY4WXMCHSFqQtbgLHhy8J"
    "3HZqQK93v8HNA2ew5PpY1Bt+zUnOahJYc3cjUr/5kpyf9h973NGSeEJ5gn8dJ3l90Ui74wqrFvweuHX1AH2BNifm80mU7rOL7hz1"
    "JOvOjzyzU4jEoq04sa1pZbv3O/MK8qehIOMKsLs62ss9C9EGiQ2iQE4dh46utxnlmxmjOTv8XAJajmqnBH0v5+8Piey/aSKx9kBR"
    "SN+Y0TnAijmPr4u6S7OdxOp5R5Q+kc7bPHpueQU4rms6M1DkCZqXjmd2b10M/sXPpMrvuwVrRmt5j/rLm1dCuqpVSDPqhoHzrzpu"
    "3YurRMzgW1lLqzvMmbcWyj4W0g8WAAsE6njDwBOya9cGh2aXMU4GNyI429Ea94bukIHUrWjjgmj6fquQzh05QwoSpgJxZyunnDB3"
    "anU0hk5cthuIyUQzzhbSbMHonmv3tyDnzLNgWxgHx1QIUevDSPRvwJrZZ+YtupkkIJLLdMl8scU0bd0n8Ov2C+6adTSbqybJv9he"
    "yvSONQISfylcHfaDFJ/qLrs7VQmGKUjwpw+y9MWlh/BdcDdWEJrzls/SoOGlV/D5aT1kGfaZV4r/SGTNPMjO57KgXdeQXDqxhNoa"
    "jMcVd9cAzWva7ElROb+pwRrXaQqJSctvxknnEDyzUUDWXayD7SEcVhg3A3hUU8IVzqSqOUvQRJ0l8NTNm3Ayowy2eN0mXW9ngiPf"
    "FEHOAW9yJ/8xV/ssm/NbVorvJixAjY4RcI3xHzJUVcfL3pkAA54pokvfFKkEmAL2qJ8E4W8/g+sPwqHn8wJcFTsehU8PhkpSJwXm"
    "L+/jiVfrsf8od6sLXjMrStTJrt+OOKHCaJRrCKtbuR3YJNnAJboL8f6SDlL4wIxWLwxiw8qlaFGuKdj/5xJR0UoTfBGTovL9x0C9"
    "cza8JzHIR8rUEVynRXNb+6GtTRZnr6GPzg7cA3ryXvTB5Ux4RrQaPm6rJ/G2xmRwRSmwtMnmdNz2MgOr2/nMNxvI49ua0GRoDhFL"
    "rMcVWSZk2nIT6mXMg2jWDI0Vi2YnyMnBeWZqNH1xNoxbZAWFnubo95rDfN6iPSCTf8ydNe7HdLsq2b9wLf14qxifC7zJ2j2YQRO+"
    "bkNi2zaCleKbsdivNHKz6BG2ikwGx46vALHrpeEdszqS2FRJYiNkybT30sT2lTJKHn1P0R/2OS4qEsBTq5eREWkkAtQKXBudtTV8"
    "FenldiGK6ZhAb6a34tXiCvRNdTWz9c4susSzHT4MFVK7/+e/IxD8q9JGi2RyQJy5Bl8TuIMN3fwbZBgmOukpOENZaTO41Ocllvsd"
    "i7TaoGBqYCr7WXMnSur/SYrevmWzbs0ieh9zwK2o4yT+yCiP7M1j3WYGw/cyH+GJtxblznQv9+xSOH30R0glAnt5//NCVOH3gxOb"
    "Wl2W0X6QWf30DOSuNsPc60L6o+NTue9Oe1HX0Fn8ckBIf43mv9XoP/zLk4Dio143CVsIfn+yKmteiaGYaYboWsd4JPZMh2ne8LQ8"
    "litzEis/KzDQSMVNXrZ0nk0VEHOwZee/TALfPaQZsyAW1GjEkTFT3jud+iFEZDT/wXsh7c4W0tO2EjBukhu/9s1OImY5XTSJdYOG"
    "oZvg93dCmrrdFm/rRXxAhiH9Muxtp3vFyOF1YpjIcfTsN+XZ0JMDa5Hv6OxSkSqkA0atvNjDNYzYYUagQBZRMSchvfq+DxgoxbJf"
    "F6SzVqNeNkstGokcTgLt0ErY1SFEYybGop0l9o7T0lpEq7WXkh9tuQKrulWU6ZCDC2bF8ZHPKtmujFtwpdZ1ZmHFWZh/TAr15k5B"
    "Ed4mKCRfBqios/Tv6jVswcBZ8Ke0hjUQWlD3fdkiw84v/NvMUtHhhENYzF4GT1JZgTmvYGaj/2zQvlOcxth84q2XMDwTsZhzGSwh"
    "FwJG533dD2Sr7wBzbZwnmX07lVgb6BM8vpWpDKnkgwWpeF9kGfFfZYjCCgLgUzV1VK6djHe2Qob+siLFibOA+QFfvCvZkxjLpIDt"
    "uSFYoXg6KChhBfsXfoa7S/bhipF2RsAqI3pyLNERs4DpYalcvc5V/sqhMSjhhRqX1NXOVY2ZSVoWNYp0mhZyypGufObry9xlo/lg"
    "WvtsstxAgU9+Vi1Y9toVSDdmA/o1BF9fZA+CHM3oprvPuatzv8IZCCCzpjdsg30GnmB5nrcExfxj5yoiv9qGVo9sIE8a9XjerAA0"
    "LdoO729PEOVP2MevHqQw8OpbkrOwkDTb6eDdF1vKZx/ey3eWT2AUJxvi6XFl7DLfRDww05B3Oz8RPH3ogafa+QJe4RsnUfVdZGhd"
    "zCeeOet4SGYflFjuxt6MHRb4S42QtN2GcH+hAxLzWgd6RXfx4TsP4F8XGzpJMw7O3GxKpQ8eAzf7lVD7foBswx1Rx9zT5LdqAeAc"
    "dOGnH1Ox4v50bHvCDv0PBPU/EA=="
)
_THAI2ROM_BANGKOK_HIDDEN = (
    "eNoN0Is31XcAAPDLhjuy2Vkhea9I56ZY87j3++B2nSOPpjhKs3mcOWTTmUIy7textaFzqG1iqA5D6mrzdt37+36/OI1syc6ReVV3"
    "Hs2UMiPmEetP+HyUJw1Qp1M/yx3oYspUI+Y2Y8Dc/3wLX9gkOPPJl15hzVJUEnuCbRpgDeQSWLdKuEWoCb8+SnDWmDn/uWiIxuoZ"
    "84neXtnnnQp+PGgU3Ukk/MAa4SIvKN3oscJhhlUwe7eF0Bd9FiSeWoalDrneNsY+yMjACUUc0VHxshJvH0HS/dEF4JllOs6ff8Ga"
    "JydBRYOC2Tytgg1ffM/OXyLYMqcW+PvGoxnDp+jypEu7D8/RDlef4b/+R7h+9LRw7BrBHeGLWtH+XnXpaJ4s9n450qoGUc0twhfH"
    "ZttD0z00U2tXqG6F8KWXBEteGTZq9ZHeBsHO1EW6PCtRD35EkWhXqaZu7B0sGt4hG/z0frtSq/YWtV+R2lsU0IFgdx7g2gNFnu7g"
    "sC4fLgQayJxiAOyzyGZb9s14lywSzDYIhzOEP64k/Ad3fZTt7C/ETaQz0Z73NM7AHzkkJqGFvwkvSHGnp6ex8HGpA59b/+CA9U1H"
    "z/HcZI3Xq/ukWldevBKHQ6MI7yggfMVxSBDd+UQmuiiTGrMwLvImXDXzHNqbKsE/IUVAskywYmsm1ngWQ6vELjQ1RvAWOyVOb/Xw"
    "civ8QxNrFcEWR2qkkv4oLhsToxBFtpA23AUkNS7g3t1+0CqYM7usG6hRa0Oj1I+g9EQgy3ieQoVkJd81+y2UJzQDqwwzOhihBMZq"
    "R/RmUTUs6hMLe4/54qurS8gzR8VSvLahsJJtQlWcH21cc+XmeTc0GedMcI9roTDU9TuVzpWxythNdHi8nNbVJ2HTiXRev1WEN30T"
    "sfLeaVz/L+G+4gTk2ktgnL89VJzpp3IChKnyBu1liY5mtFyHJxvSgMrPBBwv1QDxsA+3Hg1kbrpg9CTPUrApSOevh2ew+ACMr+VL"
    "ua2ingZ9pgU2Dh5YXfOIGkevsf7YSlqX2cqEFYxqgDlqaTrPdr9UsdtXu8GQypdLWs5So5t7uUnFQaw4ZMaq45OEQwo5nivJhTsn"
    "L9KHXw8wl58e0P6/3tc8dCnTqhMtUFqhJTR/FwNdUD7a1/aYree/jSOtVWxcnIWS7W8J5+Jq6W/TmVjcu4wW1l9j31VY4V8Kd+KO"
    "1D18oi2YFzl5wiggxbfnv5EVl7mCyGfBfF6Wy5q2W+O7D17Qo0GnqO1IMmsiOuFIoyG4NPwG9G7slqmX5FBPTIAc+iGzhiCh09GU"
    "JcfbQVujNllwUZuwI+ECCDi6qg7/cFgbUmDAjRxieIzfApL/aIciv5LT7qVU9j+RqPBl"
)


def _f32(blob, shape):
    return np.frombuffer(zlib.decompress(base64.b64decode(blob)), dtype=np.float32).reshape(shape).copy()


def build_pythainlp_thai2rom_decoder_bangkok_step0():
    ids = np.array([_THAI2ROM_BANGKOK_IDS], dtype=np.int64)
    enc = _f32(_THAI2ROM_BANGKOK_ENC_OUT, (1, len(_THAI2ROM_BANGKOK_IDS), 256))
    return {
        "decoder_input": np.array([[1]], dtype=np.int32),  # target <start>
        "decoder_hidden_1": _f32(_THAI2ROM_BANGKOK_HIDDEN, (1, 1, 256)),
        "encoder_outputs": enc,
        "mask": (ids[:, : enc.shape[1]] != 0).astype(np.float32),  # mask.tolist() of bools -> float input
    }


BUILDERS = {
    "credsweeper_weak_passwords_batch3": build_credsweeper_weak_passwords_batch3,
    "pythainlp_thai2rom_decoder_bangkok_step0": build_pythainlp_thai2rom_decoder_bangkok_step0,
}
